# docs/ops.md is the table of gradients as the code is: every registered op, its backward rule or why it has
# none, the ops that rule makes, and a test whose float64 gradient check runs it. This runs every test file
# with a gradient check, with KILN_OPS_LOG set (tests/support/gradcheck.cpp logs each rule it runs), has
# `kiln ops --gradchecks LOG` make the table, and compares it with docs/ops.md; with -DWRITE=ON it writes
# docs/ops.md instead (make ops-table).
#   cmake -DTESTS=<kiln_tests> -DCLI=<kiln> -DSOURCE_DIR=<source> -DWORK_DIR=<scratch> [-DWRITE=ON] -P this
file(GLOB_RECURSE sources ${SOURCE_DIR}/tests/*.cpp)
set(tags "")
foreach(source ${sources})
  if(source MATCHES "/tests/(support|fuzz)/")
    continue()
  endif()
  file(READ ${source} text)
  if(text MATCHES "gradcheck\\(")
    get_filename_component(name ${source} NAME_WE)
    list(APPEND tags "[#${name}]")
  endif()
endforeach()
list(REMOVE_DUPLICATES tags)
string(REPLACE ";" "," tags "${tags}")
file(MAKE_DIRECTORY ${WORK_DIR})
set(log ${WORK_DIR}/ops.log)
file(REMOVE ${log})
execute_process(COMMAND ${CMAKE_COMMAND} -E env KILN_OPS_LOG=${log} ${TESTS} --filenames-as-tags "${tags}"
                RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the gradient checks failed (${TESTS} --filenames-as-tags \"${tags}\"):\n${output}")
endif()
execute_process(COMMAND ${CLI} ops --gradchecks ${log} RESULT_VARIABLE result OUTPUT_VARIABLE table ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "kiln ops failed:\n${errors}")
endif()
if(WRITE)
  file(WRITE ${SOURCE_DIR}/docs/ops.md "${table}")
  message(STATUS "wrote docs/ops.md")
  return()
endif()
file(READ ${SOURCE_DIR}/docs/ops.md written)
if(NOT written STREQUAL table)
  file(WRITE ${WORK_DIR}/ops.md "${table}")
  message(FATAL_ERROR "docs/ops.md is out of date: make ops-table writes it again (the table as the code is: "
                      "${WORK_DIR}/ops.md)")
endif()
if(table MATCHES "none, and no reason given")
  message(FATAL_ERROR "docs/ops.md: an op has neither a backward rule nor a reason for having none "
                      "(OpDef::not_differentiable): give it one")
endif()
message(STATUS "docs/ops.md is current")
