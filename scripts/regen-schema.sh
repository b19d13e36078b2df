#!/usr/bin/env bash
# Regenerates every flatc output committed under src/pterun: the Python readers
# and the layout tables the verifier walks. Run it after editing any .fbs file.
#
# flatc: $FLATC, else `flatc` on PATH, else the one in ExecuTorch's wheel
# (`pip install -e '.[test]'` installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
"$python" scripts/regen-schema.py \
  --out src/pterun/format/_generated \
  src/pterun/format/schema/program.fbs src/pterun/format/schema/flat_tensor.fbs \
  src/pterun/format/schema/etdump.fbs src/pterun/format/schema/bundled_program.fbs
for schema in src/pterun/backends/*/schema/*.fbs; do
  [ -e "$schema" ] || continue
  "$python" scripts/regen-schema.py --out "$(dirname "$(dirname "$schema")")/_generated" "$schema"
done
