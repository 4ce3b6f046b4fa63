# Run at every build (the build_commit target): writes OUT, a C++ source defining mn::cli::build_commit(), the
# checkout's HEAD ("-dirty" after it where tracked files differ from it; "unknown" outside a git checkout), and
# rewrites it only when that changes, so a commit relinks the command alone. A binary then names the code it
# was built from wherever it is carried (a benchmark machine's own checkout can be stale: bench/run_gpu.sh).
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse HEAD OUTPUT_VARIABLE commit RESULT_VARIABLE failed
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(failed OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" diff --quiet HEAD -- RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty)
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "// Generated at build time by cmake/build_commit.cmake.\nnamespace mn::cli {\nconst char* build_commit() { return \"${commit}\"; }\n}  // namespace mn::cli\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
