#!/usr/bin/env bash
# What the GPU smoke check carries to a GPU machine without a package index (docs/gpus.md), made
# here, where the index is reached: .gpu/llama-source.tar.xz (the llama.cpp source cut from the
# pinned llama-cpp-python sdist, with its manifest) and .gpu/whl/ (wheels for Python 3.12 of
# Snakemake and what it needs that the machine's image lacks; numpy, pandas, scipy, matplotlib,
# seaborn, psutil, PyYAML, requests and the rest are there already). .gpu/ is ignored by git and
# travels with `carry`. On the machine, one command:
#
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl &&
#   PYTHONPATH=/tmp/site:workflow python3 benchmarks/gpu_smoke.py \
#       --llama-source .gpu/llama-source.tar.xz --out "$OUT/gpu_smoke.json"
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
pins=$("$PYTHON" -c 'import yaml; p = yaml.safe_load(open("config/config.yaml"))["provision"]
print(p["llama_cpp_python_version"], p["llama_cpp_python_sha256"])')
read -r version sha256 <<<"$pins"
mkdir -p .gpu
[ -f .gpu/llama-source.tar.xz ] || "$PYTHON" -m specsweep provision llama-source --version "$version" \
  --sha256 "$sha256" --out .gpu/llama-source.tar.xz
snakemake_version=$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("snakemake"))')
rm -rf .gpu/whl .gpu/all && mkdir -p .gpu/whl .gpu/all
"$PYTHON" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .gpu/all "snakemake==$snakemake_version"
# The image's own packages (the device tool's KINDS.md lists them): carrying them again would
# install a second version beside the first.
HAS=(numpy pandas scipy matplotlib seaborn psutil pyyaml requests jinja2 markupsafe pygments packaging
     pyparsing python_dateutil six tabulate typing_extensions urllib3 idna certifi charset_normalizer
     attrs wrapt contourpy cycler fonttools kiwisolver pillow tqdm rich markdown_it_py mdurl filelock
     fsspec networkx sympy mpmath setuptools prometheus_client nvidia_ml_py click msgpack toolz pyarrow zipp)
pattern="^($(IFS='|'; echo "${HAS[*]}"))-"
for wheel in .gpu/all/*.whl; do
  name=$(basename "$wheel" | tr 'A-Z' 'a-z')
  echo "$name" | grep -Eq "$pattern" || cp "$wheel" .gpu/whl/
done
rm -rf .gpu/all
du -sh .gpu/llama-source.tar.xz .gpu/whl
ls .gpu/whl
