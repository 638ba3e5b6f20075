# -DSHARDTRAIN_SANITIZE=address,undefined (or thread): compile and link every
# target of this project (library, tests, probes) with those sanitizers, GCC or
# clang. LibTorch, Open MPI, HDF5 and OpenBLAS stay uninstrumented system
# libraries; their own leak reports are suppressed by tests/sanitizers/lsan.supp
# (each entry says why), and scripts/sanitize.sh runs the suite with it.
set(SHARDTRAIN_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined or thread (empty: none)")
function(shardtrain_enable_sanitizers)
  if(SHARDTRAIN_SANITIZE STREQUAL "")
    return()
  endif()
  if(SHARDTRAIN_SANITIZE MATCHES "thread" AND SHARDTRAIN_SANITIZE MATCHES "address")
    message(FATAL_ERROR "SHARDTRAIN_SANITIZE: thread cannot be combined with address")
  endif()
  set(_flags -fsanitize=${SHARDTRAIN_SANITIZE} -fno-omit-frame-pointer -g)
  if(SHARDTRAIN_SANITIZE MATCHES "undefined")
    # Every UB report fails the run (a test cannot pass with one printed and ignored).
    list(APPEND _flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_flags})
  add_link_options(-fsanitize=${SHARDTRAIN_SANITIZE})
  add_compile_definitions(SHARDTRAIN_SANITIZED=1)
  if(SHARDTRAIN_SANITIZE MATCHES "address")
    # Plugins stay loaded, so that leak reports name their library
    # (tests/sanitizers/keep_modules_loaded.c).
    add_library(st_keep_modules_loaded OBJECT ${PROJECT_SOURCE_DIR}/tests/sanitizers/keep_modules_loaded.c)
    link_libraries(st_keep_modules_loaded)
  endif()
  message(STATUS "shardtrain: sanitizers ${SHARDTRAIN_SANITIZE}")
endfunction()
shardtrain_enable_sanitizers()
