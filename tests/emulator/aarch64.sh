#!/usr/bin/env bash
# An emulated aarch64 machine for the cross-target tests: Debian's qemu-user runs an aarch64 Python (Debian's
# arm64 packages unpacked into a directory, not installed) with the aarch64 wheels of TVM and numpy from PyPI,
# so that TVM's RPC server there loads and runs what this machine cross-builds. Also installs the cross
# toolchain that links those builds. Needs root (apt-get) and the package registries; idempotent: a finished
# root is reused.
#
#   tests/emulator/aarch64.sh [ROOT]      # default ROOT: ~/.cache/autotune/aarch64
#
# Prints the root; ROOT/python runs Python there (qemu-aarch64 on ROOT/sysroot's python3.11, ROOT/site on its
# path). That script is also its sys.executable (ROOT/site/sitecustomize.py), so that the processes TVM's RPC
# server starts run emulated too (without binfmt_misc, the kernel cannot exec an aarch64 binary).
set -euo pipefail
root=${1:-${AUTOTUNE_AARCH64_ROOT:-$HOME/.cache/autotune/aarch64}}
TVM_WHEELS=("apache-tvm==0.27.0.post1" "apache-tvm-ffi<0.1.15" "numpy<2.5" ml_dtypes typing_extensions psutil
            cloudpickle tornado)
DEBS=(libc6 libgcc-s1 libstdc++6 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libexpat1 zlib1g
      libffi8 libssl3 libbz2-1.0 liblzma5 libuuid1 libcrypt1 libsqlite3-0 libncursesw6 libtinfo6
      libreadline8 libdb5.3 libgdbm6)

if [ -f "$root/ready" ]; then echo "$root"; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
need=()
command -v qemu-aarch64 > /dev/null || need+=(qemu-user)
command -v aarch64-linux-gnu-g++ > /dev/null || need+=(g++-aarch64-linux-gnu)
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
fi
apt-get update -qq
[ ${#need[@]} -eq 0 ] || apt-get install -y -qq "${need[@]}" > /dev/null

rm -rf "$root.partial" && mkdir -p "$root.partial/debs" "$root.partial/sysroot" "$root.partial/site"
(cd "$root.partial/debs" && apt-get download -qq "${DEBS[@]/%/:arm64}")
for deb in "$root.partial"/debs/*.deb; do dpkg-deb -x "$deb" "$root.partial/sysroot"; done
rm -rf "$root.partial/debs"
"${PYTHON:-python3}" -m pip install --quiet --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 --platform manylinux_2_24_aarch64 \
  --platform manylinux2014_aarch64 --target "$root.partial/site" "${TVM_WHEELS[@]}"
cat > "$root.partial/python" <<PY
#!/bin/sh
export PYTHONPATH="$root/site\${PYTHONPATH:+:\$PYTHONPATH}" AUTOTUNE_EMULATED_PYTHON="$root/python"
exec qemu-aarch64 -L "$root/sysroot" "$root/sysroot/usr/bin/python3.11" "\$@"
PY
chmod +x "$root.partial/python"
cat > "$root.partial/site/sitecustomize.py" <<'PY'
import os
import sys

sys.executable = os.environ.get("AUTOTUNE_EMULATED_PYTHON", sys.executable)
PY
rm -rf "$root" && mv "$root.partial" "$root"
# the emulated Python imports TVM: the proof that the root works
"$root/python" -c "import platform, sys, tvm; assert platform.machine() == 'aarch64', platform.machine(); print(sys.executable)"
touch "$root/ready"
echo "$root"
