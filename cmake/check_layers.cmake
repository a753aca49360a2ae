# The layering rule, checked on every build (cmake -P, from src/CMakeLists.txt):
#
#   cli/            parse and print            public headers only
#   quantize/       compression of models      public headers only
#   src/runs, jobs  tie store and engine       common, store, engine, runs
#   src/serve       models over HTTP           common, store, engine, runs, serve
#   src/engine      the engine                 common, engine
#   store/          the store                  common, store
#   base/           hashes (anneal_base)       common
#
# Public headers (include/anneal/*.h) each belong to one layer (the lists
# below) and obey that layer's rule too. A quoted include of another
# directory's internals ("engine/...", "runs/...") is allowed only where that
# directory is the file's own layer. Any violation fails the build with the
# file, the line and the rule.
#
# No command-line words below cli/ either: a string literal in any layer
# below it (or in a public header) that names a flag (starting with --word
# or holding " --word") fails the build, unless the allow-list below names
# the file and the flag with the reason. The layers below name an input as
# a concept (a Subject of anneal/error.h, which cli/error_text.cc says as
# its flag) or by a label their caller in cli/ passes; so a flag renamed
# in cli/ cannot leave an old spelling in a message.
#
#   cmake -DROOT=<source dir> -DSTAMP=<file to touch on success> -P check_layers.cmake
cmake_minimum_required(VERSION 3.25)

set(common   error spelling fault_point report version build_info hash weights_hash)
set(store    store object_store encryption catalog_runs catalog_jobs catalog_watch datasets dataset_rows data_check formats delimited_scan input_stream table chunker maintenance fs audit)
set(engine   tensor backend backend_plugin communicator communicator_plugin device layers network piecewise_linear loss optimizer trainer linear boosted_trees sample_source)
set(runs     runs config jobs model_metrics calibration preprocess model_file model_kind model_inputs scoring run_report onnx_export prediction)
set(quantize quantize)
set(serve    serve)

# Per source layer: its files, the public-header layers it may include, and
# the internal include prefixes it may use (<local>: a same-directory include
# without a slash, like "sqlite.h").
set(base_files    base/*.cc)
set(base_may      common)
set(base_internal <local>)
set(store_files    store/*.cc store/*.h store/formats/*.cc store/formats/*.h store/fault/*.cc)
set(store_may      common store)
set(store_internal formats/ fault/ <local>)
set(engine_files    src/engine/*.cc src/engine/*.h src/engine/cpu/*.cc src/engine/cpu/*.h src/engine/cuda/*.cc src/engine/cuda/*.cu src/engine/cuda/*.h src/engine/mpi/*.cc)
set(engine_may      common engine)
set(engine_internal engine/)
set(runs_files    src/runs/*.cc src/runs/*.h src/jobs/*.cc src/jobs/*.h)
set(runs_may      common store engine runs)
set(runs_internal runs/ jobs/)
set(quantize_files    quantize/*.cc quantize/*.h)
set(quantize_may      common store engine runs quantize)
set(quantize_internal <local>)
set(serve_files    src/serve/*.cc src/serve/*.h)
set(serve_may      common store engine runs serve)
set(serve_internal serve/)
set(cli_files    cli/*.cc cli/*.h)
set(cli_may      common store engine runs quantize serve)
set(cli_internal <local>)
# A public header may include the public headers its own layer may.
set(common_may common)

set(violations "")

function(layer_of header out)
  foreach(layer common store engine runs quantize serve)
    if(header IN_LIST ${layer})
      set(${out} ${layer} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

# check(file, allowed public layers, allowed internal prefixes)
function(check_file file allowed_layers allowed_prefixes)
  file(STRINGS "${ROOT}/${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  file(READ "${ROOT}/${file}" content)
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" path "${line}")
    # The line number: newlines before the include's first occurrence.
    string(FIND "${content}" "${line}" offset)
    string(SUBSTRING "${content}" 0 ${offset} before)
    string(REGEX MATCHALL "\n" newlines "${before}")
    list(LENGTH newlines number)
    math(EXPR number "${number} + 1")
    if(path MATCHES "^anneal/([a-z_0-9]+)\\.h$")
      set(header ${CMAKE_MATCH_1})
      layer_of(${header} layer)
      if(layer STREQUAL "")
        set(message "${file}:${number}: anneal/${header}.h belongs to no layer (add it to cmake/check_layers.cmake)")
      elseif(NOT layer IN_LIST allowed_layers)
        set(message "${file}:${number}: includes anneal/${header}.h of the ${layer} layer; this file may include ${allowed_layers}")
      else()
        continue()
      endif()
    else()
      set(ok FALSE)
      foreach(prefix IN LISTS allowed_prefixes)
        if(prefix STREQUAL "<local>")
          if(NOT path MATCHES "/")
            set(ok TRUE)
          endif()
        elseif(path MATCHES "^${prefix}")
          set(ok TRUE)
        endif()
      endforeach()
      if(ok)
        continue()
      endif()
      set(message "${file}:${number}: includes \"${path}\", another layer's internals; use a public header")
    endif()
    string(APPEND violations "${message}\n")
  endforeach()
  set(violations "${violations}" PARENT_SCOPE)
endfunction()

foreach(layer base store engine runs quantize serve cli)
  set(globs "")
  foreach(glob IN LISTS ${layer}_files)
    list(APPEND globs "${ROOT}/${glob}")
  endforeach()
  file(GLOB files RELATIVE "${ROOT}" ${globs})
  foreach(file IN LISTS files)
    check_file("${file}" "${${layer}_may}" "${${layer}_internal}")
  endforeach()
endforeach()

file(GLOB headers RELATIVE "${ROOT}" "${ROOT}/include/anneal/*.h")
foreach(file IN LISTS headers)
  get_filename_component(header ${file} NAME_WE)
  layer_of(${header} layer)
  if(layer STREQUAL "")
    set(violations "${violations}${file}: belongs to no layer (add it to cmake/check_layers.cmake)\n")
    continue()
  endif()
  check_file("${file}" "${${layer}_may}" "")
endforeach()

# ---- Flags below cli/ --------------------------------------------------------

# "FILE FLAG" pairs a string literal may hold, each with why.
set(flag_words_allowed
  # mpirun's own options, in the mpirun command line a worker starts a job
  # of several ranks with (not anneal's flags).
  "src/jobs/worker.cc --bind-to"
  "src/jobs/worker.cc --hostfile"
  # The run report (an HTML page for the user, not an error) points at the
  # command that prints the whole confusion matrix, and at the retrain flag
  # that runs the data checks: user help, like a man page, with no caller
  # in cli/ between the report and its reader.
  "src/runs/run_report.cc --json"
  "src/runs/run_report.cc --max-drift")

function(check_flag_words file)
  # Only lines that could hold a flag; whole-line comments are skipped.
  file(STRINGS "${ROOT}/${file}" lines REGEX "--[a-z]")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*(//|/\\*|\\*)")
      continue()
    endif()
    # Escaped backslashes and quotes out, so that literals pair up; then a
    # trailing comment off (a // outside any literal).
    string(REPLACE "\\\\" "" code "${line}")
    string(REPLACE "\\\"" "" code "${code}")
    string(REGEX REPLACE "^(([^\"/]|\"[^\"]*\"|/[^/\"])*)//.*$" "\\1" code "${code}")
    string(REGEX MATCHALL "\"[^\"]*\"" literals "${code}")
    foreach(literal IN LISTS literals)
      if(literal MATCHES "(^\"| )(--[a-z][a-z0-9-]*)")
        set(flag "${CMAKE_MATCH_2}")
        if(NOT "${file} ${flag}" IN_LIST flag_words_allowed)
          set(violations "${violations}${file}: a string literal names the flag ${flag}: ${literal} (below cli/, name the input by a Subject or a label cli/ passes; see cmake/check_layers.cmake)\n")
        endif()
      endif()
    endforeach()
  endforeach()
  set(violations "${violations}" PARENT_SCOPE)
endfunction()

foreach(layer base store engine runs quantize serve)
  set(globs "")
  foreach(glob IN LISTS ${layer}_files)
    list(APPEND globs "${ROOT}/${glob}")
  endforeach()
  file(GLOB files RELATIVE "${ROOT}" ${globs})
  foreach(file IN LISTS files)
    check_flag_words("${file}")
  endforeach()
endforeach()
foreach(file IN LISTS headers)
  check_flag_words("${file}")
endforeach()

if(NOT violations STREQUAL "")
  message(FATAL_ERROR "layering violations (see cmake/check_layers.cmake):\n${violations}")
endif()
file(TOUCH "${STAMP}")
