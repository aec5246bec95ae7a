#!/usr/bin/env bash
# What the GPU smoke check carries to a machine without a package index (docs/gpus.md), made here,
# where the index is reached, from the checkout alone (specsweep need not be installed):
#
#   OUT/llama-source.tar.xz  the llama.cpp source cut from the pinned llama-cpp-python sdist (+ .json)
#   OUT/cache/               specsweep's cache holding what the smoke study takes from the index
#                            (its prompt set), carried and used as $SPECSWEEP_CACHE (docs/offline.md)
#   OUT/whl/                 wheels for the target Python of what specsweep needs at run time and
#                            the machine's image lacks (Snakemake and its own needs; the image's
#                            list: benchmarks/gpu_image_packages.txt). A package published only as
#                            source is built into a wheel here, and must come out pure Python.
#   OUT/llama-server-prebuilt.tar.xz  with --server MANIFEST: the llama-server that manifest names
#                            (built here beforehand, benchmarks/cuda_compile.py for the GPU), so that
#                            the device call finds it in its cache and compiles nothing (issue 40.2)
#   OUT/carry.json           what was carried, what the image is expected to give, and the size
#
# usage: bash benchmarks/gpu_carry.sh [--python-version 3.12] [--out .gpu] [--server MANIFEST]
# (3.12: the GPU image's Python; a test that runs the carry under this machine's Python passes 3.11)
# The whole must stay under the 64 MiB that travels with the working tree; the script fails if not.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
python_version=3.12
out=.gpu
server=
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) python_version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --server) server=$(realpath "$2"); shift 2 ;;
    *) echo "gpu_carry.sh: unknown argument $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
limit=$((64 << 20))
export PYTHONPATH="$PWD/workflow${PYTHONPATH:+:$PYTHONPATH}"  # the checkout's own specsweep
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out/whl"

# 1. The server's source, cut from the pinned sdist (pins: the study schema's defaults).
"$PYTHON" -m specsweep provision llama-source --out "$out/llama-source.tar.xz"

# 2. The cache: whatever the smoke study takes from the package index (gpu_checks.py owns the study).
"$PYTHON" benchmarks/gpu_carry.py cache --carry "$out"

# 2b. A server built beforehand, packed as the smoke check unpacks it (gpu_carry.py owns the format).
echo '{}' > "$tmp/prebuilt.json"
if [ -n "$server" ]; then
  "$PYTHON" benchmarks/gpu_carry.py server "$server" --carry "$out" > "$tmp/prebuilt.json"
fi

# 3. Wheels. What specsweep needs at run time is pyproject.toml's dependencies; resolved once for
# this Python to find what is published only as source (pip refuses source for another Python),
# those built here, then resolved for the target Python, wheels only.
mapfile -t requirements < <("$PYTHON" -c 'import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
target=(--only-binary=:all: --python-version "$python_version" --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --find-links "$tmp/built")
"$PYTHON" -m pip install -q --dry-run --ignore-installed --report "$tmp/here.json" "${requirements[@]}"
mapfile -t sources < <("$PYTHON" -c 'import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    if not item["download_info"]["url"].endswith(".whl"):
        print(item["metadata"]["name"] + "==" + item["metadata"]["version"])' "$tmp/here.json")
mkdir -p "$tmp/built"
if [ ${#sources[@]} -gt 0 ]; then
  "$PYTHON" -m pip wheel -q --no-deps -w "$tmp/built" "${sources[@]}"
  for wheel in "$tmp/built"/*.whl; do
    case "$wheel" in
      *-none-any.whl) ;;
      *) echo "gpu_carry.sh: $(basename "$wheel") is built from source for this machine only; carry it another way" >&2
         exit 1 ;;
    esac
  done
fi
"$PYTHON" -m pip install -q --dry-run --ignore-installed --target "$tmp/target" --report "$tmp/there.json" \
  "${target[@]}" "${requirements[@]}"
mapfile -t fetch < <("$PYTHON" - "$tmp/there.json" benchmarks/gpu_image_packages.txt "$out/carry.json" \
  "$python_version" <<'EOF'
import json, re, sys
report, image_list, carry, version = sys.argv[1:]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
image = {norm(line.strip()) for line in open(image_list) if line.strip() and not line.startswith("#")}
resolved = [(item["metadata"]["name"], item["metadata"]["version"]) for item in json.load(open(report))["install"]]
fetch = [f"{n}=={v}" for n, v in resolved if norm(n) not in image]
json.dump({"python_version": version, "carried_wheels": fetch,
           "from_image": [f"{n}=={v}" for n, v in resolved if norm(n) in image]}, open(carry, "w"), indent=1)
print("\n".join(fetch))
EOF
)
"$PYTHON" -m pip download -q --no-deps "${target[@]}" -d "$out/whl" "${fetch[@]}"

size=$(du -sb "$out" | cut -f1)
"$PYTHON" -c 'import json, sys
path, size, prebuilt = sys.argv[1], int(sys.argv[2]), json.load(open(sys.argv[3]))
doc = json.load(open(path)); doc.update(bytes=size, prebuilt=prebuilt or None)
json.dump(doc, open(path, "w"), indent=1)' "$out/carry.json" "$size" "$tmp/prebuilt.json"
du -sh "$out/llama-source.tar.xz" "$out/cache" "$out/whl" "$out"/llama-server-prebuilt.tar.xz 2>/dev/null || true
echo "gpu_carry.sh: $out holds $size bytes ($(ls "$out/whl" | wc -l) wheels for Python $python_version)"
if [ "$size" -gt "$limit" ]; then
  echo "gpu_carry.sh: $out is over the 64 MiB ($limit bytes) that travel with the working tree" >&2
  exit 1
fi
