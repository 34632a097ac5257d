# python/pipit.cmake -- the Python package (python/pipit, docs/python.md),
# included from CMakeLists.txt after the install rules:
#   - the build tree: a copy of the package in ${CMAKE_BINARY_DIR}/python,
#     its _libpath.py naming this build's shared library (libpipit.so in a
#     shared build, else the shared twin test_exports uses), so that
#     `PYTHONPATH=BUILD/python python3 -c 'import pipit'` works;
#   - install (shared builds only: a static libpipit has no .so to load):
#     the package in PIPIT_PYTHON_DIR (default lib/python3/dist-packages,
#     on Debian's python3 path for the /usr/local prefix), its _libpath.py
#     naming the installed libpipit.so relative to itself: no
#     LD_LIBRARY_PATH;
#   - the ctest entry python_pytest: pytest over tests/python
#     (tests/python/run_pytest.sh; skipped without pytest, under TSan; its
#     MPI tests skip in sanitizer builds and without mpirun).
set(PIPIT_PYTHON_DIR "lib/python3/dist-packages" CACHE STRING
    "Where cmake --install puts the Python package pipit (relative to the prefix)")
file(GLOB PIPIT_PY_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/pipit/*.py)
list(FILTER PIPIT_PY_SOURCES EXCLUDE REGEX "/_libpath\\.py$")
foreach(f ${PIPIT_PY_SOURCES})
  get_filename_component(n ${f} NAME)
  configure_file(${f} ${CMAKE_BINARY_DIR}/python/pipit/${n} COPYONLY)
endforeach()
# the shared library of this build (pipit_shared_check: defined below with
# the tests, in a static build; without tests a static build has none)
if(BUILD_SHARED_LIBS)
  set(PIPIT_PY_LIB pipit)
elseif(PIPIT_BUILD_TESTS)
  set(PIPIT_PY_LIB pipit_shared_check)
endif()
if(PIPIT_PY_LIB)
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/python/pipit/_libpath.py
       CONTENT "# written by CMake: this build's shared library\nRELATIVE = \"$<TARGET_FILE:${PIPIT_PY_LIB}>\"\n")
endif()
if(BUILD_SHARED_LIBS)
  file(RELATIVE_PATH pipit_py_rel "/${PIPIT_PYTHON_DIR}/pipit" "/${CMAKE_INSTALL_LIBDIR}")
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/python-install/_libpath.py
       CONTENT "# written by CMake at install: the library relative to this package\nRELATIVE = \"${pipit_py_rel}/$<TARGET_FILE_NAME:pipit>\"\n")
  install(FILES ${PIPIT_PY_SOURCES} ${CMAKE_BINARY_DIR}/python-install/_libpath.py
          DESTINATION ${PIPIT_PYTHON_DIR}/pipit)
endif()
if(PIPIT_PY_LIB AND PIPIT_BUILD_TESTS)
  add_test(NAME python_pytest COMMAND bash ${CMAKE_SOURCE_DIR}/tests/python/run_pytest.sh)
  # RESOURCE_LOCK mpirun: test_mpi.py runs mpirun -np 2 (one mpirun at a time, as the MPI tests)
  set_tests_properties(python_pytest PROPERTIES TIMEOUT ${PIPIT_TEST_TIMEOUT} SKIP_RETURN_CODE 77 RESOURCE_LOCK mpirun
    ENVIRONMENT "PIPIT_LIBRARY=$<TARGET_FILE:${PIPIT_PY_LIB}>;PIPIT_CLI=$<TARGET_FILE:pipit_cli>;PYTHONPATH=${CMAKE_BINARY_DIR}/python;PIPIT_SANITIZE=${PIPIT_SANITIZE};PIPIT_SOURCE_DIR=${CMAKE_SOURCE_DIR};PIPIT_BUILD_DIR=${CMAKE_BINARY_DIR};PIPIT_SHARED_BUILD=$<BOOL:${BUILD_SHARED_LIBS}>")
endif()
