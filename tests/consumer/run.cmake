# Installs the kiln just built into a scratch prefix, then configures, builds and runs an outside
# project that finds it with find_package(kiln).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
foreach(step
    "${CMAKE_COMMAND};--install;${BINARY_DIR};--prefix;${prefix}"
    "${CMAKE_COMMAND};-S;${SOURCE_DIR};-B;${WORK_DIR}/build;-DCMAKE_PREFIX_PATH=${prefix};-DCMAKE_BUILD_TYPE=Release"
    "${CMAKE_COMMAND};--build;${WORK_DIR}/build"
    "${WORK_DIR}/build/consumer")
  execute_process(COMMAND ${step} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "consumer step failed: ${step}\n${output}")
  endif()
endforeach()
message(STATUS "consumer built against the installed package and ran: ${output}")
