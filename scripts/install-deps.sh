#!/usr/bin/env bash
# Installs the Debian packages roifs needs to build, run its demo and run its tests, if missing.
set -euo pipefail
pkgs=(gcc meson ninja-build pkg-config fuse3 libfuse3-dev libblosc-dev libinih-dev
      libjansson-dev libzstd-dev zlib1g-dev libxxhash-dev
      python3 python3-numpy python3-zarr python3-numcodecs python3-dask python3-pytest
      python3-scipy python3-anndata python3-xarray python3-skimage
      python3-jsonschema        # tests/e2e/test_plate.py: the official NGFF schemas
      clang libclang-rt-14-dev  # these two: fuzz/run.sh (libFuzzer and its sanitizers)
      xxhash                    # xxh128sum: the hashes of provenance attributes, checked
      zip unzip rsync nginx     # readers of tests/e2e/test_size_contract.py (which starts its
                                # own nginx on a loopback port; the service is not needed)
      libcurl4-openssl-dev openssl)  # remote inputs (docs/remote.md); openssl: the tests' CA
pkgs+=(libmicrohttpd-dev        # roifs serve (src/serve/)
       python3-fsspec python3-aiohttp  # tests/e2e/test_serve.py: zarr over HTTP
       chromium wrk)            # tests/e2e/test_serve_browser.py; bench/serve.py
pkgs+=(bindfs)                  # tests/e2e/test_hosts.py: each simulated host's mirror of the cache
pkgs+=(iproute2 openssh-server openssh-client sshfs)  # tests/e2e/test_hosts_sshfs.py: hosts in
                                # network namespaces, sshd on one, sshfs on the other
# Node.js and npm run zarrita.js, the independent Zarr v3 reader of the tests; Debian's
# packages only when the machine has none.
command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "roifs: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
