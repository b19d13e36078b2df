#!/usr/bin/env bash
# Builds pterun's sdist and wheel, checks their metadata (twine check), checks that the wheel holds every
# file of src/pterun that git tracks (the package data: example programs and tokenizer, .fbs schemas, WGSL
# shaders), then installs the wheel alone into a fresh virtualenv and runs the CLI from a folder with no
# source tree, so a file missing from the package fails here rather than on a user's machine.
# Run from anywhere: `bash scripts/check-package.sh` (.ci/run does, before the tests).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/pterun-package-XXXXXX")"
trap 'rm -rf "$work"' EXIT
step() { printf '\n== %s (at %ss)\n' "$*" "$SECONDS"; }
# pip's and build's output goes to a log, shown when they fail.
quiet() { "$@" >"$work/log" 2>&1 || { cat "$work/log"; return 1; }; }

step "build and twine (a virtualenv of their own)"
python3 -m venv "$work/tools"
quiet "$work/tools/bin/pip" install build twine

step "sdist and wheel (the wheel is built from the sdist)"
quiet "$work/tools/bin/python" -m build --outdir "$work/dist" "$root"
ls -l "$work/dist"
"$work/tools/bin/python" -m twine check --strict "$work"/dist/*
wheel="$(echo "$work"/dist/pterun-*.whl)"

step "the wheel holds every file git tracks under src/pterun"
git -C "$root" ls-files -- src/pterun >"$work/tracked"
python3 - "$wheel" "$work/tracked" <<'EOF'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
tracked = [line.strip().removeprefix("src/") for line in open(sys.argv[2]) if line.strip()]
# Notes for developers (README.md beside a backend) are not package data, nor the C sources the extension is
# built from.
missing = [path for path in tracked if path not in names and not path.endswith((".md", ".c", ".h"))]
if missing:
    sys.exit("the wheel lacks these files of src/pterun (add them to [tool.setuptools.package-data]):\n  "
             + "\n  ".join(missing))
print(f"{len(tracked)} tracked files, all in {sys.argv[1].rsplit('/', 1)[-1]}")
EOF

step "install the wheel alone (torch from pip's cache or the local file)"
python3 -m venv "$work/venv"
quiet "$work/venv/bin/pip" install torch==2.13.0 "$wheel[llm]"

step "the CLI from outside the source tree"
cd "$work"
unset PYTHONPATH
bin="$work/venv/bin"
"$bin/python" - "$work/venv" <<'EOF'
import sys
import pterun
assert pterun.__file__.startswith(sys.argv[1]), f"pterun was imported from {pterun.__file__}, not the wheel"
EOF
expected="pterun $(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$root/pyproject.toml")"
found="$("$bin/pterun" --version)"
[ "$found" = "$expected" ] || { echo "pterun --version printed '$found', expected '$expected'"; exit 1; }
echo "$found"
step "the wheel's native kernels load and compute what the PyTorch path computes"
"$bin/python" - <<'EOF'
import torch
from pterun.backends.xnnpack.nodes import native
built, why = native.available()
assert built, why
print(why)
# XNNPACK's dynamic quantization of rows, natively and in PyTorch's ops
x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0)) * 5
q, zp, scale = torch.empty(3, 64, dtype=torch.int8), torch.empty(3), torch.empty(3)
native._kernels().quantize_rows(native.ISAS[native.kernel_isa()], x.data_ptr(), 3, 64, 64, q.data_ptr(), 64,
                                zp.data_ptr(), scale.data_ptr())
s = torch.div(torch.tensor(255.0), x.amax(1).clamp(min=0) - x.amin(1).clamp(max=0))  # (255.0 / t is 255 * (1 / t))
assert torch.equal(scale, torch.reciprocal(s))
assert torch.equal(q.float(), (torch.round(x * s[:, None]) + zp[:, None]).clamp(-128, 127))
# a static 8-bit depthwise convolution and an 8-bit add, against the same integer arithmetic in PyTorch's ops
w = torch.randint(-128, 128, (8, 3, 3, 1), dtype=torch.int8, generator=torch.Generator().manual_seed(1))
xi = torch.randint(-128, 128, (1, 5, 5, 8), dtype=torch.int8, generator=torch.Generator().manual_seed(2))
layer = native.qconv_pack(None, 8, 1, 1, (3, 3), (1, 1), (1, 1), (1, 1), w, torch.full((8,), 2.0 ** -10), None,
                          0, 0, -128, 127)
y = torch.empty(1, 5, 5, 8, dtype=torch.int8)
native._kernels().qconv_run(layer, 1, 5, 5, xi.data_ptr(), 5, 5, y.data_ptr(), 1)
sums = torch.nn.functional.conv2d(xi.permute(0, 3, 1, 2).double(), w.permute(0, 3, 1, 2).double(), padding=1,
                                  groups=8)
assert torch.equal(y.permute(0, 3, 1, 2).double(), torch.round(sums * 2.0 ** -10).clamp(-128, 127))
add = native.qbinary_make("add", (1, 5, 5, 8), (1, 5, 5, 8), (8,), 1 << 19, 1 << 19, 1 << 19, 20, 0.0, 0, -128, 127)
native._kernels().qbinary_run(add, xi.data_ptr(), w.data_ptr(), y.data_ptr(), 1)
assert torch.equal(y.int(), torch.div(xi.int() + w.view(-1)[:8].int() + 1, 2, rounding_mode="floor").clamp(-128, 127))
# XNNPACK's float kernels, where this CPU runs a family of them: within float32 rounding of PyTorch's functions
family = native.float_family()
if family is not None:
    y = torch.empty_like(x)
    native._kernels().vunary(native.VOPS["XNNSigmoid"], native.VFAMILIES[family], x.data_ptr(), y.data_ptr(),
                          x.numel(), 0.0, 1)
    torch.testing.assert_close(y, torch.sigmoid(x), rtol=1e-6, atol=1e-7)
    native._kernels().softmax(native.VFAMILIES[family], x.data_ptr(), y.data_ptr(), 3, 64, 1)
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-5, atol=1e-7)
# ExecuTorch's float32 attention over a KV cache, natively, against the same loop in PyTorch's operations
from pterun.kernels.llm import attention
print(attention.route())
g = torch.Generator().manual_seed(3)
q, k, v = torch.randn(1, 3, 4, 16, generator=g), torch.randn(1, 40, 2, 16, generator=g), torch.randn(1, 40, 2, 16, generator=g)
out = torch.empty(q.shape)
assert attention._native_into(q, k, v, 5, None, True, None, out, 8, False), "the native attention kernel takes the call"
torch.testing.assert_close(out, attention._torch_into(q, k, v, 5, None, True, None, torch.empty(q.shape), 8, False),
                           rtol=1e-5, atol=1e-6)
# The fused float32 chains, natively and as PyTorch's steps: the same bits
from pterun.kernels import fused
assert fused._rms_norm_lanes(), "the native RMSNorm sums as PyTorch's steps do"
x, w, out = torch.randn(3, 768, generator=g), torch.randn(768, generator=g), torch.empty(0)
assert torch.equal(fused.RmsNormInto()(x, w, 1e-5, out=out), torch.rms_norm(x, (768,), w, 1e-5))
x, cos, sin = torch.randn(1, 2, 4, 8, 2, generator=g), torch.randn(1, 2, 1, 8, generator=g), torch.randn(1, 2, 1, 8, generator=g)
rotary = fused.RotaryInto()
assert torch.equal(rotary(x, cos, sin, out=torch.empty(0)), fused.rotary(x, cos, sin)) and rotary._native is not None
EOF
"$bin/pterun" run --repeat 2 --warmup 0
"$bin/pterun" inspect
"$bin/pterun" generate --prompt "The river runs" --max-new-tokens 8
step "the package is fine"
