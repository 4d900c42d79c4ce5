#!/usr/bin/env bash
# wheelhouse.sh: download the wheels rlsweep's trainer child, `rlsweep trial` and `rlsweep gpu-check`
# need on a GPU host that has no network and already has torch/transformers/accelerate/peft/... but
# not TRL, bitsandbytes, datasets, pydantic or Unsloth. Run from a project checkout's root, on any
# machine that reaches the package registry; the result goes to ./.whl/ (copy it to the GPU host).
#
# Targets CPython 3.12 on manylinux x86_64. Pinned to the project's pyproject ranges and to what the
# project's CPU venv runs (trl 1.14.2, bitsandbytes 0.50.2, unsloth/unsloth_zoo 2026.10.9, ...).
# Ray and MLflow are left out on purpose (rlsweep trial/gpu-check do not import them), and so is every
# package Unsloth declares but does not import at `import unsloth` time (tyro, msgspec, xformers,
# diffusers, torchao, cut_cross_entropy, hf_transfer, json5, nest-asyncio, structlog: each is either
# never imported by unsloth/unsloth_zoo or imported only behind find_spec/try).
#
# The stock wheels come to ~76 MiB (bitsandbytes 41 MiB: CUDA 11.8-13.2 + ROCm + XPU builds; unsloth
# 27 MiB, 25 of them its Studio web app), over the 60 MiB one transfer allows, so by default they are
# split into two groups, each under the limit:
#   .whl/a  bitsandbytes, trl, datasets, dill, multiprocess, pydantic(+core, annotated-types,
#           typing-inspection), typing-extensions, liger-kernel  -> enough for TRL and Liger trials
#   .whl/b  unsloth, unsloth_zoo                    -> adds the Unsloth stack
# Install a, then b, into the same --target (see docs/gpu-results.md, "Offline GPU host").
#
# SLIM=1 instead writes ONE group straight into .whl/ (~17 MiB): the same wheels, with bitsandbytes
# repacked to keep only its CPU and CUDA 13.x libraries (BNB_KEEP, default "cpu cuda130 cuda132"; the
# host's torch is CUDA 13) and unsloth repacked without studio/ (the Studio web app; only the `unsloth`
# CLI imports it, never `import unsloth`). File names, versions and metadata are unchanged; RECORD
# drops the removed files.
#
# RAY=1 adds Ray, so that `rlsweep run` (Ray Tune) runs on the host as users run it: Ray's wheel (76 MiB)
# repacked by tools/ray_slim.py to 33 MiB (no Java jar, no dashboard web app, no rllib/serve/llm, binaries
# stripped; RECORD rewritten and checked), with jsonschema, jsonschema-specifications, referencing and
# rpds-py. Ray's other requirements (click, filelock, msgpack, packaging, protobuf, pyyaml, requests, attrs;
# Tune's pandas, pyarrow, fsspec) are not in it: the host must have them (docs/offline.md has the check).
# With SLIM=1 they join the one group in .whl/ (about 51 MiB in all); else they are a third group, .whl/c.
#
# Environment:
#   SLIM=1            one repacked group in .whl/ (see above); default 0: stock wheels, .whl/a + .whl/b
#   RAY=1             add the slim Ray and its missing requirements (see above); default 0
#   BNB_KEEP="..."    bitsandbytes libraries kept by SLIM=1 (default "cpu cuda130 cuda132")
#   PY_VERSION=3.11   download cp311 builds instead (pydantic-core, multiprocess differ): for a local
#                     check on this project's Python 3.11 machines; the GPU host wants the default 3.12
#   LIMIT_MIB=60      per-group size limit; the script fails when a group is over it
#   NO_HASHES=1       skip the sha256 pins (e.g. after changing a version below)
#   PYTHON=python3    the interpreter whose pip downloads
set -euo pipefail

DEST=.whl
LIMIT_MIB=${LIMIT_MIB:-60}
SLIM=${SLIM:-0}
RAY=${RAY:-0}
BNB_KEEP=${BNB_KEEP:-"cpu cuda130 cuda132"}
PY_VERSION=${PY_VERSION:-3.12}
PYTHON=${PYTHON:-python3}

if [[ ! -f pyproject.toml || ! -d trainers || ! -d orchestrator ]]; then
    echo "wheelhouse.sh: run it from the rlsweep checkout's root (no pyproject.toml/trainers/orchestrator here)" >&2
    exit 2
fi

# name==version, and the sha256 of the cp312 (and cp311) wheel of each: pip refuses any other file.
GROUP_A=(
    "bitsandbytes==0.50.2 --hash=sha256:55348a9a4a21bfd99cf8c7b32fe67b4030ae5c2a05738e03c1747f65fa6ec283"
    "trl==1.14.2 --hash=sha256:bd97adb0284f2520ae8c5ebf243e2e4b3cbe50f09cb5964547e38dfc1d37694e"
    "datasets==4.8.5 --hash=sha256:5079900781719c0e063a8efdd2cd95a31ad0c63209178669cd23cf1b926149ff"
    "dill==0.4.1 --hash=sha256:1e1ce33e978ae97fcfcff5638477032b801c46c7c65cf717f95fbc2248f79a9d"
    "multiprocess==0.70.19 --hash=sha256:3a56c0e85dd5025161bac5ce138dcac1e49174c7d8e74596537e729fd5c53c28 --hash=sha256:928851ae7973aea4ce0eaf330bbdafb2e01398a91518d5c8818802845564f45c"
    "pydantic==2.14.3 --hash=sha256:3f7b347782ab7e4cf4c798496ae3a82787d9f21ec12676a9c564355eeef8daa8"
    "pydantic-core==2.50.4 --hash=sha256:c81d98e27d9d9261909dcccab1ba5d6ea1c98b0bb9470e368604614fd1d36ddd --hash=sha256:0574866e05f6adeecc520d87e87dd06210c0a51706341f6ef8421572f5a64444"
    "annotated-types==0.8.0 --hash=sha256:f072f4d804ea359e4eaf198b1af7a8b0943881a87f31bb764f8bf219bb9419e0"
    "typing-inspection==0.4.5 --hash=sha256:bc210535442b39e1bf2805e0c7a17dfd6a4ace760c84c7f7d16245d23a6b1c39"
    "typing-extensions==4.16.0 --hash=sha256:481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8"
    "liger-kernel==0.8.5 --hash=sha256:60789cd576af073ab9b192b570d2597fd0cdad489cd62fb44fb16256d43754c9"
)
GROUP_B=(
    "unsloth==2026.10.9 --hash=sha256:feb40b99bc4f8c543a36cbd0fe6e1410d6e4ac16bd4d0c731f607adce3d63bb0"
    "unsloth_zoo==2026.10.9 --hash=sha256:f68e0576b0e9bd2ef85f19bf665132c576b52ee4df923fbb16c81538a3cde676"
)
GROUP_RAY=(
    "ray==2.60.0 --hash=sha256:b951b40965947a63615830916be04f26440d234de1e9a29dbf2155d03fa9ad2a --hash=sha256:e227f6b2af8ab4626dd9a35a5860b33864325ea137383d57f854d4637ee3fea2"
    "jsonschema==4.26.0 --hash=sha256:d489f15263b8d200f8387e64b4c3a75f06629559fb73deb8fdfb525f2dab50ce"
    "jsonschema-specifications==2025.9.1 --hash=sha256:98802fee3a11ee76ecaca44429fda8a41bff98b00a0f2838151b113f210cc6fe"
    "referencing==0.37.0 --hash=sha256:381329a9f99628c9069361716891d34ad94af76e461dcb0335825aecc7692231"
    "rpds-py==2026.9.1 --hash=sha256:addeda51556dac7c1a2f14cda62db8b621cd12afba3091d03a96c72932387eab --hash=sha256:136a1c3fe4402b7008bc81cb62ee538481795b61a7e83df88dff3b3f02b726ff"
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

download() {  # download GROUP_NAME DIR REQ...
    local name=$1 dir=$2
    shift 2
    mkdir -p "$dir"
    if [[ ${NO_HASHES:-0} == 1 ]]; then
        printf '%s\n' "$@" | sed 's/ --hash=[^ ]*//g' >"$tmp/req-$name.txt"
    else
        printf '%s\n' "$@" >"$tmp/req-$name.txt"
    fi
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --no-cache-dir \
        --python-version "$PY_VERSION" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64 \
        -r "$tmp/req-$name.txt" -d "$dir" >"$tmp/pip-$name.log" 2>&1 || {
        grep -v "is ignored: it is neither a file nor a directory" "$tmp/pip-$name.log" >&2
        echo "wheelhouse.sh: pip download failed for group $name" >&2
        exit 1
    }
    local want have
    want=$(grep -c . "$tmp/req-$name.txt")
    have=$(find "$dir" -maxdepth 1 -name '*.whl' | wc -l)
    if [[ $have -lt $want ]]; then
        echo "wheelhouse.sh: group $name: $have of $want wheels downloaded" >&2
        exit 1
    fi
}

slim() {  # slim WHEEL: repack in place without the files a CUDA 13 host's `import unsloth` never reads
    "$PYTHON" - "$1" "$BNB_KEEP" <<'PY'
import base64, hashlib, os, re, sys, zipfile
path, keep = sys.argv[1], sys.argv[2].split()
name = os.path.basename(path)
if name.startswith("bitsandbytes-"):
    kept = {f"bitsandbytes/libbitsandbytes_{k}.so" for k in keep}
    drop = lambda f: re.fullmatch(r"bitsandbytes/libbitsandbytes_\w+\.so", f) is not None and f not in kept
elif name.startswith("unsloth-"):
    drop = lambda f: f.startswith("studio/")
else:
    sys.exit(0)
src = zipfile.ZipFile(path)
out = path + ".slim"
dropped = 0
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
    for info in src.infolist():
        if drop(info.filename):
            dropped += 1
            continue
        data = src.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(l for l in lines if not drop(l.split(",", 1)[0].strip('"'))).encode()
        dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
os.replace(out, path)
print(f"  slimmed {name}: {dropped} files left out")
PY
}

ray_group() {  # ray_group DIR: the Ray group, its wheel slimmed by tools/ray_slim.py, into DIR
    local dir=$1
    download ray "$tmp/ray" "${GROUP_RAY[@]}"
    mkdir -p "$dir"
    "$PYTHON" tools/ray_slim.py "$tmp"/ray/ray-*.whl "$dir" | sed 's/^/  slimmed /'
    find "$tmp/ray" -maxdepth 1 -name '*.whl' ! -name 'ray-*' -exec mv {} "$dir" \;
}

report() {  # report DIR: list the wheels with sizes; fail when over LIMIT_MIB
    local dir=$1 total=0 size f
    echo "$dir:"
    for f in "$dir"/*.whl; do
        size=$(stat -c %s "$f")
        total=$((total + size))
        awk -v s="$size" -v n="$(basename "$f")" 'BEGIN { printf "  %8.2f MiB  %s\n", s / 1048576, n }'
    done
    awk -v s="$total" -v d="$dir" 'BEGIN { printf "  %8.2f MiB  total (%s)\n", s / 1048576, d }'
    if ((total > LIMIT_MIB * 1048576)); then
        echo "wheelhouse.sh: $dir is over ${LIMIT_MIB} MiB" >&2
        exit 1
    fi
}

rm -rf "$DEST"
if [[ $SLIM == 1 ]]; then
    download all "$DEST" "${GROUP_A[@]}" "${GROUP_B[@]}"
    for f in "$DEST"/bitsandbytes-*.whl "$DEST"/unsloth-*.whl; do slim "$f"; done
    if [[ $RAY == 1 ]]; then ray_group "$DEST"; fi
    report "$DEST"
    echo "one group: python3 -m pip install ... $DEST/*.whl (see docs/gpu-results.md, 'Offline GPU host')"
else
    download a "$DEST/a" "${GROUP_A[@]}"
    download b "$DEST/b" "${GROUP_B[@]}"
    report "$DEST/a"
    report "$DEST/b"
    groups=".whl/a then .whl/b"
    if [[ $RAY == 1 ]]; then
        ray_group "$DEST/c"
        report "$DEST/c"
        groups=".whl/a, .whl/b then .whl/c"
    fi
    awk -v s="$(cat "$DEST"/*/*.whl | wc -c)" -v l="$LIMIT_MIB" -v g="$groups" 'BEGIN {
        printf "all: %.2f MiB (%s one %d MiB transfer): install %s into the same --target\n",
            s / 1048576, (s > l * 1048576 ? "over" : "within"), l, g }'
fi
