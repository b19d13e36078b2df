"""Generates, for each .fbs file given, the flatc Python reader and a layout table.

The reader is flatc's own output (`--python --gen-onefile`), untouched. The
layout table lists, for each table of the schema, the fields the generic
verifier (pterun/flatbuf/verify.py) must check; it is derived from the binary
schema flatc writes (`--binary --schema`), read through a reader that flatc
generates from our reflection.fbs, so no .fbs parsing is done by hand.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pprint
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "src" / "pterun" / "format" / "schema"

# reflection.BaseType
UTYPE, BOOL, BYTE, UBYTE, SHORT, USHORT, INT, UINT, LONG, ULONG, FLOAT, DOUBLE = range(1, 13)
STRING, VECTOR, OBJ, UNION, ARRAY, VECTOR64 = range(13, 19)
SCALAR_SIZE = {UTYPE: 1, BOOL: 1, BYTE: 1, UBYTE: 1, SHORT: 2, USHORT: 2, INT: 4, UINT: 4,
               LONG: 8, ULONG: 8, FLOAT: 4, DOUBLE: 8}
# NumPy's type code for each scalar, as the bulk readers (pterun/flatbuf/bulk.py) gather it.
SCALAR_CODE = {UTYPE: "<u1", BOOL: "?", BYTE: "<i1", UBYTE: "<u1", SHORT: "<i2", USHORT: "<u2", INT: "<i4",
               UINT: "<u4", LONG: "<i8", ULONG: "<u8", FLOAT: "<f4", DOUBLE: "<f8"}


def find_flatc() -> str:
    for candidate in (os.environ.get("FLATC"), shutil.which("flatc")):
        if candidate:
            return candidate
    spec = importlib.util.find_spec("executorch")
    if spec and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "data" / "bin" / "flatc"
        if path.exists():
            return str(path)
    sys.exit("flatc not found: set FLATC, put flatc on PATH, or pip install executorch")


def load_reflection(flatc: str, tmp: Path):
    subprocess.run([flatc, "--python", "--gen-onefile", "-o", str(tmp), str(SCHEMA_DIR / "reflection.fbs")],
                   check=True)
    spec = importlib.util.spec_from_file_location("reflection_generated", tmp / "reflection_generated.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def layout_of(schema) -> dict:
    objects = [schema.Objects(i) for i in range(schema.ObjectsLength())]
    enums = [schema.Enums(i) for i in range(schema.EnumsLength())]
    name = lambda obj: obj.Name().decode()  # noqa: E731

    def union_members(enum_index: int) -> dict[int, str]:
        enum = enums[enum_index]
        members = {}
        for j in range(enum.ValuesLength()):
            value = enum.Values(j)
            if value.Value() == 0:
                continue
            union_type = value.UnionType()
            members[value.Value()] = name(objects[union_type.Index()])
        return members

    tables, structs, unions, scalars = {}, {}, {}, {}
    for obj in objects:
        if obj.IsStruct():
            structs[name(obj)] = (obj.Bytesize(), obj.Minalign())
            continue
        fields = sorted((obj.Fields(j) for j in range(obj.FieldsLength())), key=lambda f: f.Id())
        by_id = {f.Id(): f for f in fields}
        rows, types = [], {}
        for field in fields:
            if field.Deprecated():
                continue
            ftype = field.Type()
            base, elem, index = ftype.BaseType(), ftype.Element(), ftype.Index()
            voffset = field.Offset()
            if base in SCALAR_SIZE:
                kind, arg = "scalar", SCALAR_SIZE[base]
                types[field.Name().decode()] = (SCALAR_CODE[base], default_of(field, base))
            elif base == STRING:
                kind, arg = "string", None
            elif base == OBJ:
                target = objects[index]
                if target.IsStruct():
                    kind, arg = "struct", (target.Bytesize(), target.Minalign())
                else:
                    kind, arg = "table", name(target)
            elif base == UNION:
                union_name = enums[index].Name().decode()
                unions[union_name] = union_members(index)
                type_field = by_id[field.Id() - 1]
                kind, arg = "union", (union_name, type_field.Offset())
            elif base == VECTOR:
                if elem in SCALAR_SIZE:
                    kind, arg = "vscalar", SCALAR_SIZE[elem]
                    types[field.Name().decode()] = (SCALAR_CODE[elem], None)
                elif elem == STRING:
                    kind, arg = "vstring", None
                elif elem == OBJ:
                    target = objects[index]
                    if target.IsStruct():
                        kind, arg = "vstruct", (target.Bytesize(), target.Minalign())
                    else:
                        kind, arg = "vtable", name(target)
                else:
                    raise SystemExit(f"{name(obj)}.{field.Name().decode()}: unsupported vector element {elem}")
            else:
                raise SystemExit(f"{name(obj)}.{field.Name().decode()}: unsupported base type {base}")
            rows.append((field.Name().decode(), voffset, kind, arg, bool(field.Required())))
        tables[name(obj)] = tuple(rows)
        if types:
            scalars[name(obj)] = types
    ident = schema.FileIdent()
    return {
        "ROOT": name(schema.RootTable()),
        "IDENT": ident.decode() if ident else "",
        "TABLES": tables,
        "STRUCTS": structs,
        "UNIONS": unions,
        # Per table, its scalar fields' and scalar vectors' elements' NumPy type codes, with each scalar's
        # default (the value an absent field reads as; None for a vector, which reads as empty).
        "SCALARS": scalars,
    }


def default_of(field, base: int) -> bool | int | float:
    if base in (FLOAT, DOUBLE):
        return field.DefaultReal()
    return bool(field.DefaultInteger()) if base == BOOL else field.DefaultInteger()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("schemas", nargs="+", type=Path)
    args = parser.parse_args()
    flatc = find_flatc()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "__init__.py").write_text('"""flatc output; regenerate with scripts/regen-schema.sh, never edit."""\n')
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        reflection = load_reflection(flatc, tmp)
        for fbs in args.schemas:
            include = ["-I", str(fbs.parent), "-I", str(SCHEMA_DIR)]
            subprocess.run([flatc, "--python", "--gen-onefile", *include, "-o", str(args.out), str(fbs)], check=True)
            subprocess.run([flatc, "--binary", "--schema", *include, "-o", str(tmp), str(fbs)], check=True)
            data = (tmp / (fbs.stem + ".bfbs")).read_bytes()
            schema = reflection.Schema.GetRootAs(data, 0)
            layout = layout_of(schema)
            text = [f'"""Layout of {fbs.name} for the verifier; generated by scripts/regen-schema.py."""', ""]
            for key, value in layout.items():
                text.append(f"{key} = {pprint.pformat(value, width=110, sort_dicts=True)}")
                text.append("")
            (args.out / f"{fbs.stem}_layout.py").write_text("\n".join(text))
            print(f"{fbs.name}: {len(layout['TABLES'])} tables -> {args.out}")


if __name__ == "__main__":
    main()
