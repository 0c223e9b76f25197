# The libFuzzer harnesses (tests/fuzz/), built alone by -DKF_FUZZ=ON with clang: the parser
# and the graph.json lowering need only src/core, src/ops and src/ir, so this build skips the rest
# of the project (OpenCL, CUDA, Criterion, the runner). docs/fuzzing.md says how to run them.
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "KF_FUZZ needs clang (libFuzzer): cmake -S . -B build-fuzz "
                      "-DCMAKE_C_COMPILER=clang -DKF_FUZZ=ON")
endif()
add_compile_options(-Wno-unknown-warning-option) # gcc's -Wno-format-truncation
find_package(PkgConfig REQUIRED)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas) # the interpreter's matmul
find_package(OpenMP REQUIRED) # clang's: Debian libomp-dev
set(KF_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer -g)
file(GLOB KF_FUZZ_OPS_SOURCES CONFIGURE_DEPENDS src/ops/*.c)
file(GLOB KF_FUZZ_IR_SOURCES CONFIGURE_DEPENDS src/ir/*.c)
set(KF_FUZZ_SOURCES src/core/core.c ${KF_FUZZ_OPS_SOURCES} ${KF_FUZZ_IR_SOURCES})
enable_testing()
foreach(h parse graph_json)
  add_executable(fuzz_${h} tests/fuzz/fuzz_${h}.c ${KF_FUZZ_SOURCES})
  target_include_directories(fuzz_${h} PRIVATE include src)
  target_compile_options(fuzz_${h} PRIVATE ${KF_FUZZ_FLAGS})
  target_link_options(fuzz_${h} PRIVATE ${KF_FUZZ_FLAGS})
  target_link_libraries(fuzz_${h} PRIVATE PkgConfig::JANSSON PkgConfig::OPENBLAS OpenMP::OpenMP_C m)
endforeach()
# The short run (seconds, a fixed seed and count): new inputs go to a corpus folder in the
# build directory; the seeds (tasks/, tests/fuzz/corpus_json/) are only read.
add_test(NAME fuzz_parse_short COMMAND sh -c
  "mkdir -p corpus_parse && exec ./fuzz_parse -seed=1 -runs=200000 -max_len=4096 corpus_parse '${CMAKE_SOURCE_DIR}/tasks'")
add_test(NAME fuzz_graph_json_short COMMAND sh -c
  "mkdir -p corpus_graph_json && exec ./fuzz_graph_json -seed=1 -runs=20000 -max_len=8192 corpus_graph_json '${CMAKE_SOURCE_DIR}/tests/fuzz/corpus_json'")
