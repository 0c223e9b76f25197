#!/bin/bash
# Build kforge for a GPU machine that lacks the build's libraries (the lent H200 has no
# jansson/OpenBLAS/Criterion headers and no OpenBLAS or Criterion at run time): a Release
# build configured from a source path that bench/cuda_h200.sh can recreate there
# ($KF_PACK_SRC or /tmp/kfsrc, linked to this checkout), with every shared library the binaries need that
# is not part of glibc or the GPU driver copied into BUILD/devlibs.
#
# usage: bench/pack_gpu_build.sh [BUILD]   (default build-h200, inside this checkout)
# then:  carry BUILD to the GPU machine and run bench/cuda_h200.sh --build BUILD
# KF_PACK_SRC names the link to configure through (default /tmp/kfsrc): two checkouts
# packed for one call (a before/after comparison) need two links. KF_PACK_TARGETS builds only
# the named targets, KF_PACK_JOBS sets the parallel jobs (default: every core).
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build-h200}
LINK=${KF_PACK_SRC:-/tmp/kfsrc}
ln -sfn "$PWD" "$LINK"
cmake -S "$LINK" -B "$LINK/$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
# KF_PACK_TARGETS: only these targets (e.g. "kforge-bin kforge-runner test_ops"), else all
if [ -n "${KF_PACK_TARGETS:-}" ]; then
  cmake --build "$LINK/$BUILD" -j "${KF_PACK_JOBS:-$(nproc)}" --target $KF_PACK_TARGETS
else
  cmake --build "$LINK/$BUILD" -j "${KF_PACK_JOBS:-$(nproc)}"
fi
rm -rf "$BUILD/devlibs" "$BUILD/test-work"
mkdir -p "$BUILD/devlibs"
# libcurl is on the GPU machine: use its own, with its own TLS and compression libraries
# (copying ours would shadow them with older builds)
CURL=$(ldd "$BUILD/kforge" | awk '/libcurl/{print $3}')
SKIP=$( { [ -n "$CURL" ] && echo "$CURL" && ldd "$CURL" | awk '/=> \//{print $3}'; } | xargs -r -n1 basename | sort -u)
for b in "$BUILD"/kforge "$BUILD"/kforge-runner "$BUILD"/test_*; do
  [ -x "$b" ] || continue
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  if echo "$SKIP" | grep -qx "$(basename "$lib")"; then continue; fi
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libmvec.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|ld-linux*|libresolv.so*|libcuda.so*|libstdc++.so*) ;;
    *) cp -L "$lib" "$BUILD/devlibs/" ;;
  esac
done
# what the copied libraries need in turn (Criterion's libgit2 needs libssh2, which the GPU
# machine's libcurl does not use, so the skip list above wrongly holds it back), except
# glibc's, the driver's, zlib and OpenSSL (the GPU machine's own serve both)
for lib in "$BUILD"/devlibs/*; do ldd "$lib" | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libmvec.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|ld-linux*|libresolv.so*|libcuda.so*|libstdc++.so*|libssl.so*|libcrypto.so*|libcurl.so*|libz.so*) ;;
    *) [ -e "$BUILD/devlibs/$(basename "$lib")" ] || { cp -L "$lib" "$BUILD/devlibs/"; echo "also $(basename "$lib")"; } ;;
  esac
done
echo "carry: $BUILD/devlibs $BUILD/CMakeCache.txt and the binaries the run needs"
du -sh "$BUILD" "$BUILD/devlibs"
