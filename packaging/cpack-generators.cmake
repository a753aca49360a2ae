# Read by cpack once per generator (CPACK_PROJECT_CONFIG_FILE): which
# components make which package. Each package is a component group: anneal
# is the shared component plus the generator's own (packaging/CMakeLists.txt
# says which files differ); anneal-cuda, where the plugin was built, is the
# plugin plus, for the .deb, its copyright and changelog; anneal-mpi, where
# the MPI plugin was built, likewise.
list(GET CPACK_INSTALL_CMAKE_PROJECTS 0 _anneal_build_dir)
if(CPACK_GENERATOR STREQUAL "DEB")
  set(_anneal_own deb)
  set(_anneal_cuda_own cuda_deb)
  set(_anneal_mpi_own mpi_deb)
  set(CPACK_DEB_COMPONENT_INSTALL ON)
elseif(CPACK_GENERATOR STREQUAL "RPM")
  set(_anneal_own rpm)
  set(_anneal_cuda_own "")
  set(_anneal_mpi_own "")
  set(CPACK_RPM_COMPONENT_INSTALL ON)
else()
  message(FATAL_ERROR "anneal is packaged as DEB and RPM only, not ${CPACK_GENERATOR}")
endif()
set(CPACK_INSTALL_CMAKE_PROJECTS "${_anneal_build_dir};anneal;ALL;/")
set(CPACK_COMPONENTS_GROUPING ONE_PER_GROUP)
set(CPACK_COMPONENTS_ALL main ${_anneal_own})
foreach(_c IN LISTS CPACK_COMPONENTS_ALL)
  string(TOUPPER ${_c} _c)
  set(CPACK_COMPONENT_${_c}_GROUP anneal)
endforeach()
if(CPACK_ANNEAL_CUDA_BUILT)
  foreach(_c cuda ${_anneal_cuda_own})
    list(APPEND CPACK_COMPONENTS_ALL ${_c})
    string(TOUPPER ${_c} _c)
    set(CPACK_COMPONENT_${_c}_GROUP cuda)
  endforeach()
endif()
if(CPACK_ANNEAL_MPI_BUILT)
  foreach(_c mpi ${_anneal_mpi_own})
    list(APPEND CPACK_COMPONENTS_ALL ${_c})
    string(TOUPPER ${_c} _c)
    set(CPACK_COMPONENT_${_c}_GROUP mpi)
  endforeach()
endif()

if(CPACK_GENERATOR STREQUAL "DEB")
  # CPackDeb puts this line before every package's description; each group
  # has its own first line in CPACK_DEBIAN_<GROUP>_DESCRIPTION instead.
  unset(CPACK_PACKAGE_DESCRIPTION_SUMMARY)
  # plugin_depends(PLUGIN WORK DIRS FLAGS OUT): the Depends dpkg-shlibdeps
  # computes for a plugin library, appended to OUT. The plugins are not part
  # of anneal's own build tree as dpkg-shlibdeps sees one, so each runs in a
  # scratch debian/ directory.
  function(plugin_depends plugin work dirs flags out)
    file(REMOVE_RECURSE ${work})
    file(WRITE ${work}/debian/control "")
    set(_args ${flags})
    foreach(_d IN LISTS dirs)
      list(APPEND _args -l${_d})
    endforeach()
    execute_process(COMMAND dpkg-shlibdeps ${_args} -O ${plugin}
                    WORKING_DIRECTORY ${work}
                    OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _rc EQUAL 0 OR NOT _out MATCHES "^shlibs:Depends=(.+)$")
      message(FATAL_ERROR "cpack-generators.cmake: dpkg-shlibdeps on ${plugin} failed (${_rc}): ${_err}${_out}")
    endif()
    file(REMOVE_RECURSE ${work})
    set(${out} "${${out}}, ${CMAKE_MATCH_1}" PARENT_SCOPE)
  endfunction()
  if(CPACK_ANNEAL_CUDA_BUILT)
    # libc6, libstdc++6 and libgcc-s1 of the plugin, as dpkg-shlibdeps
    # computes them for anneal. It finds no package for the CUDA libraries
    # (they come from outside Debian's archive: --ignore-missing-info, as
    # CPack passes it), whose packages packaging/CMakeLists.txt names.
    file(READ ${CPACK_ANNEAL_CUDA_PLUGIN_FILE} _plugin)
    plugin_depends(${_plugin} ${_anneal_build_dir}/packaging/cuda/shlibdeps "${CPACK_ANNEAL_CUDA_LIBRARY_DIRS}"
                   --ignore-missing-info CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS)
  endif()
  if(CPACK_ANNEAL_MPI_BUILT)
    # The same for the MPI plugin, without --ignore-missing-info: Open MPI is
    # Debian's (libopenmpi3 provides libmpi.so.40), so dpkg-shlibdeps must
    # find its package, and a build against an MPI from elsewhere stops here
    # rather than make a package that depends on nothing of it.
    file(READ ${CPACK_ANNEAL_MPI_PLUGIN_FILE} _plugin)
    plugin_depends(${_plugin} ${_anneal_build_dir}/packaging/mpi/shlibdeps "${CPACK_ANNEAL_MPI_LIBRARY_DIRS}" ""
                   CPACK_DEBIAN_MPI_PACKAGE_DEPENDS)
  endif()
endif()

if(CPACK_GENERATOR STREQUAL "RPM")
  # The libraries the anneal rpm bundles (packaging/rpm/bundle.cmake, which
  # its install step runs too) are in the package, so rpm is not to require
  # them of the system: their sonames are filtered from the requires rpm
  # derives from the ELF files. The requires they have of glibc stay, and
  # with them the minimum glibc version (libc.so.6(GLIBC_2.x)(64bit)).
  # anneal-cuda's and anneal-mpi's specs take the same filter: their plugins
  # are loaded only into anneal, whose bundled libstdc++ and libgcc_s they
  # then use; their CUDA and MPI requires stay.
  file(READ ${CPACK_ANNEAL_EXE_FILE} _anneal)
  set(_list ${_anneal_build_dir}/packaging/rpm-bundled)
  execute_process(COMMAND ${CPACK_ANNEAL_CMAKE} -DANNEAL=${_anneal} -DLIST_TO=${_list}
                          -P ${CPACK_ANNEAL_BUNDLE_SCRIPT}
                  RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "cpack-generators.cmake: listing the rpm's bundled libraries failed: ${_err}")
  endif()
  file(STRINGS ${_list} _bundled)
  set(_sonames "")
  set(_licenses "")
  foreach(_line IN LISTS _bundled)
    string(REPLACE "\t" ";" _line "${_line}")
    list(GET _line 0 _soname)
    list(GET _line 1 _license)
    # A POSIX extended regex, with no backslash for rpm's macros to eat.
    string(REGEX REPLACE "([.+])" "[\\1]" _soname "${_soname}")
    list(APPEND _sonames "${_soname}")
    if(_license MATCHES " OR ")
      set(_license "(${_license})")
    endif()
    list(APPEND _licenses "${_license}")
  endforeach()
  list(REMOVE_DUPLICATES _licenses)
  list(REMOVE_ITEM _licenses "${CPACK_RPM_PACKAGE_LICENSE}")
  list(JOIN _sonames "|" _sonames)
  list(JOIN _licenses " AND " _licenses)
  string(APPEND CPACK_RPM_SPEC_MORE_DEFINE "
%global __requires_exclude ^(${_sonames})[(]")
  # One License line serves both specs; rpm picks by the package's name.
  set(CPACK_RPM_PACKAGE_LICENSE
      "%[\"%{name}\" == \"anneal\" ? \"${CPACK_RPM_PACKAGE_LICENSE} AND ${_licenses}\" : \"${CPACK_RPM_PACKAGE_LICENSE}\"]")
endif()
