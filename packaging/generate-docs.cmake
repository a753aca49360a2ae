# Writes the man page (plain and gzipped) and the bash completion from the
# built binary; run at build time by packaging/CMakeLists.txt:
#   cmake -DANNEAL=... -DMANPAGE=.../anneal.1 -DCOMPLETION=... -P generate-docs.cmake
# Each file is written under a temporary name first, so that a failing run
# leaves nothing that make would take as up to date.
function(generate output)
  execute_process(COMMAND ${ARGN} OUTPUT_FILE ${output}.tmp RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    file(REMOVE ${output}.tmp)
    message(FATAL_ERROR "${ARGN} failed (${rc})")
  endif()
  file(RENAME ${output}.tmp ${output})
endfunction()

generate(${MANPAGE} ${ANNEAL} --help-man)
# -n: no name or time stamp, so the packages are reproducible; -9 as lintian wants.
generate(${MANPAGE}.gz gzip -9n -c ${MANPAGE})
generate(${COMPLETION} ${ANNEAL} --completion bash)
