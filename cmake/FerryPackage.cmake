# cmake/FerryPackage.cmake: what `cmake --install build --prefix P` puts
# under P for users of libferry, and the two ways to find it:
#   lib/libferry.so.MAJOR.MINOR.PATCH (+ SONAME and dev links), lib/libferry.a
#   include/ferry/ferry.h, ferry_verify.h (which ferry.h includes)
#   lib/pkgconfig/ferry.pc            pkg-config ferry
#   lib/cmake/Ferry/                  find_package(Ferry) -> Ferry::ferry
#   lib/python3/dist-packages/ferry/  the Python package (FERRY_INSTALL_PYTHON)
# (ps-server and trainer install themselves from ps/ and trainer/.)
# Included by the top level after clients/ is added.
include(CMakePackageConfigHelpers)

install(TARGETS ferry EXPORT FerryTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${FERRY_ARCHIVE} DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/clients/include/ferry/ferry.h
  ${PROJECT_SOURCE_DIR}/clients/include/ferry/ferry_verify.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ferry)

# CMake package: the exported shared target plus Ferry::ferry_static,
# which FerryConfig.cmake declares by hand (libferry.a is a prelinked
# archive, not a CMake target).
set(FERRY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Ferry)
install(EXPORT FerryTargets NAMESPACE Ferry:: DESTINATION ${FERRY_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/FerryConfig.cmake.in
  ${PROJECT_BINARY_DIR}/FerryConfig.cmake
  INSTALL_DESTINATION ${FERRY_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
# The ABI promise: any 0.x >= the one asked for (same MAJOR) will do.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/FerryConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/FerryConfig.cmake
  ${PROJECT_BINARY_DIR}/FerryConfigVersion.cmake DESTINATION ${FERRY_CMAKE_DIR})

# pkg-config: the prefix is only known when installing (--prefix), so the
# file is finished then. The configure step fills in everything else and
# leaves @FERRY_PC_PREFIX@ for the install step.
set(FERRY_PC_PREFIX "@FERRY_PC_PREFIX@")
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(FERRY_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(FERRY_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
# ferry_install_with_prefix(STAGE OUT VAR DEST): at install time, when the
# prefix is known (DESTDIR and --prefix included), configure STAGE into OUT
# with @VAR@ = that prefix and install OUT into <prefix>/DEST.
function(ferry_install_with_prefix stage out var dest)
  install(CODE "
    set(${var} \"\${CMAKE_INSTALL_PREFIX}\")
    configure_file(\"${stage}\" \"${out}\" @ONLY)
    file(INSTALL \"${out}\" DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${dest}\")
  ")
endfunction()

configure_file(${CMAKE_CURRENT_LIST_DIR}/ferry.pc.in
  ${PROJECT_BINARY_DIR}/ferry.pc.stage @ONLY)
ferry_install_with_prefix(${PROJECT_BINARY_DIR}/ferry.pc.stage
  ${PROJECT_BINARY_DIR}/ferry.pc FERRY_PC_PREFIX
  ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The Python package (python/ferry: ctypes over libferry, no compiled code)
# under <prefix>/${FERRY_INSTALL_PYTHONDIR}, with a generated ferry/_prefix.py
# naming the prefix, so that the installed package loads this libferry and
# `python3 -m ferry.run` finds this ps-server wherever the prefix is.
# `pip install ./python` is the other way in (python/README.md).
option(FERRY_INSTALL_PYTHON "cmake --install also installs the Python package" ON)
set(FERRY_INSTALL_PYTHONDIR "lib/python3/dist-packages" CACHE STRING
  "Where the Python package goes, relative to the prefix (Debian's layout)")
if(FERRY_INSTALL_PYTHON)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/ferry/
    DESTINATION ${FERRY_INSTALL_PYTHONDIR}/ferry
    FILES_MATCHING PATTERN "*.py"
    PATTERN "__pycache__" EXCLUDE PATTERN "_prefix.py" EXCLUDE)
  # Like ferry.pc, the prefix is known only when installing.
  file(WRITE ${PROJECT_BINARY_DIR}/ferry_prefix.py.stage
    "\"\"\"Written by cmake --install: the prefix this copy of the ferry\n"
    "package was installed into (its libferry and ps-server).\"\"\"\n"
    "PREFIX = \"@FERRY_PY_PREFIX@\"\n"
    "LIBDIR = \"${CMAKE_INSTALL_LIBDIR}\"\n"
    "BINDIR = \"${CMAKE_INSTALL_BINDIR}\"\n")
  ferry_install_with_prefix(${PROJECT_BINARY_DIR}/ferry_prefix.py.stage
    ${PROJECT_BINARY_DIR}/_prefix.py FERRY_PY_PREFIX
    ${FERRY_INSTALL_PYTHONDIR}/ferry)
endif()
