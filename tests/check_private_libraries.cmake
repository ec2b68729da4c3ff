# libkiln must not link libsentencepiece (it loads it privately through libkiln_sentencepiece.so): Debian's
# libsentencepiece exports the protobuf it carries, and in libkiln's dependencies it crashed every process that also
# loads libprotobuf (libtorch's peer, bench/torch_bench, did at startup).
#   cmake -DLIBRARY=<libkiln.so> -P check_private_libraries.cmake
execute_process(COMMAND readelf -d ${LIBRARY} OUTPUT_VARIABLE dynamic RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "readelf -d ${LIBRARY} failed")
endif()
string(REGEX MATCHALL "NEEDED[^\n]*" needed "${dynamic}")
foreach(line ${needed})
  if(line MATCHES "sentencepiece|protobuf")
    message(FATAL_ERROR "${LIBRARY} links ${line}: SentencePiece must stay behind the plugin")
  endif()
endforeach()
message(STATUS "${LIBRARY}: no sentencepiece or protobuf among its ${CMAKE_MATCH_COUNT} needed libraries")
