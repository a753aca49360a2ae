# The libraries the rpm carries with anneal, so that it installs on any
# x86_64 system with a new enough glibc (Fedora, RHEL and their kin have
# other sonames and versions of oneDNN, oneTBB, Boost, OpenBLAS ... than the
# Debian system it is built on, or none at all). The .deb bundles nothing:
# Debian's policy is to depend on the system's libraries.
#
# Bundled is everything the anneal executable needs, directly or through
# another library, except glibc's own libraries (ANNEAL_RPM_SYSTEM_LIBS),
# which every system has and which must match its ld.so. libstdc++ and
# libgcc_s are bundled too: Debian 12's (GCC 12) are newer than RHEL's and
# older Fedoras', and the code built here needs their newer symbols.
#
# Used in two ways:
#   include()d by the rpm component's install(CODE) (packaging/CMakeLists.txt),
#     which calls anneal_rpm_bundle() to copy the libraries into the package;
#   cmake -DANNEAL=EXE -DLIST_TO=FILE -P bundle.cmake, which cpack-generators.cmake
#     runs to learn the bundled sonames (the requires rpm must not emit) and
#     their licenses (the rpm's License).

# glibc's libraries: the only ones the rpm requires of the system.
set(ANNEAL_RPM_SYSTEM_LIBS
    "^(libc\\.so\\.6|libm\\.so\\.6|libmvec\\.so\\.1|libpthread\\.so\\.0|libdl\\.so\\.2|librt\\.so\\.1|libutil\\.so\\.1|libresolv\\.so\\.2|ld-linux-x86-64\\.so\\.2|linux-vdso\\.so\\.1)$")
# Libraries that bundled ones load with dlopen rather than link, so that no
# dependency scan sees them: name of the loader, then what it loads from its
# own directory. libtbb takes its scalable allocator from libtbbmalloc when
# it is beside it, and silently falls back to malloc when it is not.
# (libtbbbind, which libtbb loads only for NUMA and core-type constraints,
# is left out: anneal sets none, and it would bring hwloc along.)
set(ANNEAL_RPM_DLOPENED "libtbb.so.12:libtbbmalloc.so.2")
set(ANNEAL_RPM_LICENSES_FILE ${CMAKE_CURRENT_LIST_DIR}/bundled-licenses)

# anneal_rpm_bundled_libraries(EXE OUT): the paths (as the dynamic linker
# finds them on this system) of the libraries to bundle with EXE, each
# under the name it is needed by. Fails when a library cannot be found or
# two different files answer to one name.
function(anneal_rpm_bundled_libraries exe out)
  file(GET_RUNTIME_DEPENDENCIES
       EXECUTABLES ${exe}
       RESOLVED_DEPENDENCIES_VAR _resolved
       UNRESOLVED_DEPENDENCIES_VAR _unresolved
       CONFLICTING_DEPENDENCIES_PREFIX _conflict
       PRE_EXCLUDE_REGEXES "${ANNEAL_RPM_SYSTEM_LIBS}")
  # What the bundled libraries load at run time, with what those need.
  set(_extra "")
  foreach(_pair IN LISTS ANNEAL_RPM_DLOPENED)
    string(REPLACE ":" ";" _pair "${_pair}")
    list(GET _pair 0 _loader)
    list(GET _pair 1 _loaded)
    foreach(_lib IN LISTS _resolved)
      get_filename_component(_name ${_lib} NAME)
      if(_name STREQUAL _loader)
        get_filename_component(_dir ${_lib} DIRECTORY)
        if(NOT EXISTS ${_dir}/${_loaded})
          message(FATAL_ERROR "bundle.cmake: ${_loader} loads ${_loaded} from its directory, but ${_dir}/${_loaded} does not exist")
        endif()
        list(APPEND _extra ${_dir}/${_loaded})
      endif()
    endforeach()
  endforeach()
  if(_extra)
    file(GET_RUNTIME_DEPENDENCIES
         LIBRARIES ${_extra}
         RESOLVED_DEPENDENCIES_VAR _resolved_extra
         UNRESOLVED_DEPENDENCIES_VAR _unresolved_extra
         CONFLICTING_DEPENDENCIES_PREFIX _conflict_extra
         PRE_EXCLUDE_REGEXES "${ANNEAL_RPM_SYSTEM_LIBS}")
    list(APPEND _resolved ${_extra} ${_resolved_extra})
    list(APPEND _unresolved ${_unresolved_extra})
    list(APPEND _conflict_FILENAMES ${_conflict_extra_FILENAMES})
  endif()
  if(_unresolved)
    message(FATAL_ERROR "bundle.cmake: ${exe} needs ${_unresolved}, which the dynamic linker does not find here")
  endif()
  foreach(_name IN LISTS _conflict_FILENAMES)
    message(FATAL_ERROR "bundle.cmake: more than one ${_name} answers for ${exe}: ${_conflict_${_name}}")
  endforeach()
  list(REMOVE_DUPLICATES _resolved)
  list(SORT _resolved)
  set(${out} ${_resolved} PARENT_SCOPE)
endfunction()

# anneal_rpm_license(NAME OUT): the SPDX expression of the bundled library
# NAME (a soname), from bundled-licenses. A library that is not listed there
# fails the build: someone has to look at its license before it ships.
function(anneal_rpm_license name out)
  file(STRINGS ${ANNEAL_RPM_LICENSES_FILE} _lines REGEX "^[^#]")
  string(REGEX REPLACE "\\.so(\\..*)?$" "" _stem ${name})
  foreach(_line IN LISTS _lines)
    if(_line MATCHES "^([^ ]+) +(.+)$" AND CMAKE_MATCH_1 STREQUAL _stem)
      set(${out} "${CMAKE_MATCH_2}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "bundle.cmake: ${name} would be bundled in the rpm, but ${ANNEAL_RPM_LICENSES_FILE} does not give its license")
endfunction()

# anneal_rpm_debian_package(PATH OUT): the Debian package that installed
# the library PATH (through symlinks and the /usr merge), and its source
# package and version, as "package;source;version".
function(anneal_rpm_debian_package path out)
  file(REAL_PATH ${path} _real)
  set(_candidates ${_real})
  if(_real MATCHES "^/usr(/lib.*)$")
    list(APPEND _candidates ${CMAKE_MATCH_1})
  elseif(_real MATCHES "^(/lib.*)$")
    list(APPEND _candidates /usr${CMAKE_MATCH_1})
  endif()
  foreach(_p IN LISTS _candidates)
    execute_process(COMMAND dpkg-query -S ${_p} OUTPUT_VARIABLE _owner ERROR_QUIET RESULT_VARIABLE _rc
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_rc EQUAL 0 AND _owner MATCHES "^([^:,]+)(:[^:]+)?: ")
      set(_pkg ${CMAKE_MATCH_1})
      execute_process(COMMAND dpkg-query -W -f=\${source:Package}\;\${Version} ${_pkg}
                      OUTPUT_VARIABLE _info RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(_rc EQUAL 0)
        set(${out} "${_pkg};${_info}" PARENT_SCOPE)
        return()
      endif()
    endif()
  endforeach()
  message(FATAL_ERROR "bundle.cmake: no Debian package owns ${_real} (from ${path}); its license cannot be found")
endfunction()

# anneal_rpm_common_license(PATH DOC): copies Debian's license text PATH
# (/usr/share/common-licenses/NAME) to DOC/bundled/common-licenses, once:
# Debian's aliases (GPL for GPL-3) stay links, and the Apache License is
# anneal's own DOC/LICENSE.
function(anneal_rpm_common_license path doc)
  set(_dir ${doc}/bundled/common-licenses)
  get_filename_component(_base ${path} NAME)
  if(IS_SYMLINK ${path})
    file(READ_SYMLINK ${path} _target)
    get_filename_component(_target ${_target} NAME)
    get_filename_component(_source_dir ${path} DIRECTORY)
    anneal_rpm_common_license(${_source_dir}/${_target} ${doc})
    file(CREATE_LINK ${_target} ${_dir}/${_base} SYMBOLIC)
    return()
  endif()
  file(SHA256 ${path} _hash)
  file(SHA256 ${doc}/LICENSE _own)
  if(_hash STREQUAL _own)
    file(CREATE_LINK ../../LICENSE ${_dir}/${_base} SYMBOLIC)
  else()
    file(COPY_FILE ${path} ${_dir}/${_base} ONLY_IF_DIFFERENT)
  endif()
endfunction()

# anneal_rpm_bundle(EXE PREFIX): copies the libraries into
# PREFIX/lib/anneal/private, each with RUNPATH $ORIGIN (so that the
# libraries they need are found beside them too: a RUNPATH serves only the
# object that carries it), gives the copy of anneal in PREFIX/bin the
# RUNPATH $ORIGIN/../lib/anneal/private, and writes
# PREFIX/share/doc/anneal/NOTICE (which library, from which Debian package,
# under which license) with the license texts beside it in bundled/.
function(anneal_rpm_bundle exe prefix)
  find_program(_patchelf patchelf)
  if(NOT _patchelf)
    message(FATAL_ERROR "bundle.cmake: patchelf is missing: run packaging/install-deps package")
  endif()
  anneal_rpm_bundled_libraries(${exe} _libs)
  set(_private ${prefix}/lib/anneal/private)
  set(_doc ${prefix}/share/doc/anneal)
  file(REMOVE_RECURSE ${_private} ${_doc}/bundled)
  file(MAKE_DIRECTORY ${_private} ${_doc}/bundled)
  set(_notice "The anneal rpm carries these libraries in /usr/lib/anneal/private, so that
it needs nothing of the system but glibc. They are the builds of Debian 12
(bookworm) that anneal was built and tested against, unchanged but for
their RUNPATH. Each one's copyright and license, as Debian states them, is
in bundled/SOURCE-PACKAGE.copyright.gz, and the license texts those refer
to in bundled/common-licenses/.

")
  set(_texts "")
  foreach(_lib IN LISTS _libs)
    get_filename_component(_name ${_lib} NAME)
    anneal_rpm_license(${_name} _license)
    anneal_rpm_debian_package(${_lib} _deb)
    list(GET _deb 0 _pkg)
    list(GET _deb 1 _src)
    list(GET _deb 2 _version)
    if(NOT _src)
      set(_src ${_pkg})
    endif()
    file(COPY_FILE ${_lib} ${_private}/${_name})
    file(CHMOD ${_private}/${_name} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
         GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    execute_process(COMMAND ${_patchelf} --set-rpath $ORIGIN ${_private}/${_name} RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "bundle.cmake: patchelf --set-rpath on ${_private}/${_name} failed (${_rc})")
    endif()
    string(APPEND _notice "${_name}  Debian ${_pkg} ${_version} (source ${_src})  ${_license}\n")
    list(FIND _texts ${_src} _seen)
    if(_seen EQUAL -1)
      list(APPEND _texts ${_src})
      set(_copyright /usr/share/doc/${_pkg}/copyright)
      if(NOT EXISTS ${_copyright})
        message(FATAL_ERROR "bundle.cmake: ${_copyright} (the license of ${_name}) does not exist")
      endif()
      execute_process(COMMAND gzip -9n -c ${_copyright} OUTPUT_FILE ${_doc}/bundled/${_src}.copyright.gz
                      RESULT_VARIABLE _rc)
      if(NOT _rc EQUAL 0)
        message(FATAL_ERROR "bundle.cmake: gzip ${_copyright} failed")
      endif()
      # Debian's copyright files point to Debian's license texts, which
      # other systems do not have where Debian keeps them.
      file(MAKE_DIRECTORY ${_doc}/bundled/common-licenses)
      file(STRINGS ${_copyright} _refs REGEX "/usr/share/common-licenses/")
      foreach(_ref IN LISTS _refs)
        string(REGEX MATCHALL "/usr/share/common-licenses/[A-Za-z0-9.+-]*[A-Za-z0-9+]" _paths "${_ref}")
        foreach(_p IN LISTS _paths)
          if(EXISTS ${_p} AND NOT IS_DIRECTORY ${_p})
            anneal_rpm_common_license(${_p} ${_doc})
          endif()
        endforeach()
      endforeach()
    endif()
  endforeach()
  file(WRITE ${_doc}/NOTICE "${_notice}")
  execute_process(COMMAND ${_patchelf} --set-rpath $ORIGIN/../lib/anneal/private ${prefix}/bin/anneal
                  RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "bundle.cmake: patchelf --set-rpath on ${prefix}/bin/anneal failed (${_rc})")
  endif()
endfunction()

# Script mode: one line per bundled library, "SONAME<TAB>SPDX".
if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT ANNEAL OR NOT LIST_TO)
    message(FATAL_ERROR "usage: cmake -DANNEAL=EXE -DLIST_TO=FILE -P bundle.cmake")
  endif()
  anneal_rpm_bundled_libraries(${ANNEAL} _libs)
  set(_out "")
  foreach(_lib IN LISTS _libs)
    get_filename_component(_name ${_lib} NAME)
    anneal_rpm_license(${_name} _license)
    string(APPEND _out "${_name}\t${_license}\n")
  endforeach()
  file(WRITE ${LIST_TO} "${_out}")
endif()
