# echo_add_test(NAME name SOURCES ... LIBS ... [MPI_NP n...] [LABELS ...])
# Builds one GoogleTest binary. Without MPI_NP it is registered once as a plain test; with
# MPI_NP it is registered once per rank count under mpirun (label "mpi"), oversubscribed so
# the suite runs on a 2-core machine.
find_package(GTest REQUIRED)

set(ECHO_MPIRUN_FLAGS --oversubscribe --bind-to none --mca btl self,vader,tcp)
execute_process(COMMAND id -u OUTPUT_VARIABLE _echo_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_echo_uid STREQUAL "0")
  list(APPEND ECHO_MPIRUN_FLAGS --allow-run-as-root)
endif()

function(echo_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;MPI_NP;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  if(T_MPI_NP)
    # MPI tests get a main that brackets the run with MPI_Init/MPI_Finalize.
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} echo_mpi_test_main GTest::gtest)
  else()
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  endif()
  if(T_MPI_NP)
    foreach(np IN LISTS T_MPI_NP)
      add_test(NAME ${T_NAME}_np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} ${ECHO_MPIRUN_FLAGS} -np ${np} $<TARGET_FILE:${T_NAME}>)
      # NOTE: one OpenBLAS thread per rank: oversubscribed ranks must not each spawn a pool.
      set_tests_properties(${T_NAME}_np${np} PROPERTIES LABELS "mpi;${T_LABELS}" PROCESSORS ${np} TIMEOUT 600
                           ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
    endforeach()
  else()
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
    set_tests_properties(${T_NAME} PROPERTIES TIMEOUT 600 ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
    if(T_LABELS)
      set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
    endif()
  endif()
endfunction()

# echo_add_module_tests(LIBS ...): one test binary per file in the calling directory.
#   *_mpi_test.cpp   -> run under mpirun with 2 and 4 ranks (label mpi)
#   *_cuda_test.cpp  -> built only with the CUDA backend, label gpu (skips without a device)
#   *_test.cpp       -> plain test
function(echo_add_module_tests)
  cmake_parse_arguments(M "" "" "LIBS;CUDA_LIBS" ${ARGN})
  file(GLOB _files CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cpp)
  foreach(f IN LISTS _files)
    get_filename_component(stem ${f} NAME_WE)
    if(stem MATCHES "_mpi_test$")
      echo_add_test(NAME ${stem} SOURCES ${f} LIBS ${M_LIBS} MPI_NP 2 4)
    elseif(stem MATCHES "_cuda_test$")
      if(ECHO_WITH_CUDA)
        echo_add_test(NAME ${stem} SOURCES ${f} LIBS ${M_LIBS} ${M_CUDA_LIBS} LABELS gpu)
      endif()
    else()
      echo_add_test(NAME ${stem} SOURCES ${f} LIBS ${M_LIBS})
    endif()
  endforeach()
endfunction()
