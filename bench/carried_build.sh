# Sourced by the GPU-machine scripts (cuda_h200.sh, torch_cuda_smoke.sh, kb_gpu.sh), from the
# checkout's root: use_carried_build DIR makes a build made elsewhere and carried here
# (bench/pack_gpu_build.sh) runnable. Its devlibs/ go on LD_LIBRARY_PATH; the source path it
# was configured in (it finds prompts/ and python/ there) is linked to this checkout when
# missing; the CUDA tools join PATH. Sets BUILD to the build's absolute path.
use_carried_build() {
  BUILD=$(cd "$1" && pwd)
  [ -d "$BUILD/devlibs" ] && export LD_LIBRARY_PATH="$BUILD/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local src
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
  if [ -n "$src" ] && [ ! -e "$src" ]; then
    mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src" && echo "linked $src -> $PWD"
  fi
  export PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
}
