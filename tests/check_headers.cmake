# Every public header compiles on its own, and none includes xtensor, cereal or cblas: users who
# include kiln pay for the standard library only.
file(GLOB_RECURSE headers RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/kiln/*.hpp)
set(failures "")
foreach(header ${headers})
  if(header MATCHES "/detail/" OR header STREQUAL "kiln/core/xtensor_interop.hpp" OR header STREQUAL "kiln/core/planner.hpp")
    continue()
  endif()
  file(READ ${SOURCE_DIR}/${header} text)
  if(text MATCHES "#include <(xtensor|xtensor-blas|cereal|cblas)")
    list(APPEND failures "${header} includes a heavy dependency")
  endif()
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/header_check.cpp "#include <${header}>\n")
  execute_process(
    COMMAND ${CXX} -std=c++17 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -I${SOURCE_DIR}
            ${CMAKE_CURRENT_BINARY_DIR}/header_check.cpp
    RESULT_VARIABLE result ERROR_VARIABLE errors)
  if(NOT result EQUAL 0)
    list(APPEND failures "${header} does not compile on its own:\n${errors}")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "public header check failed:\n${failures}")
endif()
list(LENGTH headers count)
message(STATUS "${count} public headers are self-contained and light")
