# Read by cpack once per generator (CPACK_PROJECT_CONFIG_FILE): each package
# installs the shared component plus its own (packaging/CMakeLists.txt says
# which files differ). Installing components one by one, rather than
# CPACK_COMPONENTS_ALL, is what keeps a single, monolithic package.
list(GET CPACK_INSTALL_CMAKE_PROJECTS 0 _anneal_build_dir)
if(CPACK_GENERATOR STREQUAL "DEB")
  set(_anneal_own deb)
elseif(CPACK_GENERATOR STREQUAL "RPM")
  set(_anneal_own rpm)
else()
  message(FATAL_ERROR "anneal is packaged as DEB and RPM only, not ${CPACK_GENERATOR}")
endif()
set(CPACK_INSTALL_CMAKE_PROJECTS
    "${_anneal_build_dir};anneal;main;/"
    "${_anneal_build_dir};anneal;${_anneal_own};/")
