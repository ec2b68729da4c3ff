# The hub_generate example's quick run, as make test runs it: GPT-2's tokenizer files made from OpenAI's ranks by the
# js-tiktoken reference (tests/oracles/node), a preset made from them, then loaded again by a second run.
#   cmake -DEXAMPLE=... -DSOURCE_DIR=... -DWORK_DIR=... -P run_hub_generate.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
file(WRITE ${WORK_DIR}/texts.json "[\"ROMEO:\"]")
execute_process(COMMAND node byte_pair_reference.mjs gpt2 ${WORK_DIR}/texts.json ${WORK_DIR}/gpt2
                WORKING_DIRECTORY ${SOURCE_DIR}/tests/oracles/node RESULT_VARIABLE made)
if(NOT made EQUAL 0)
  message(FATAL_ERROR "the js-tiktoken reference did not run (scripts/install-test-oracles.sh installs it)")
endif()
foreach(run first second)
  execute_process(COMMAND ${EXAMPLE} --quick ${WORK_DIR}/gpt2/vocabulary.json ${WORK_DIR}/gpt2/merges.txt
                          ${WORK_DIR}/preset ${SOURCE_DIR}/data/tinyshakespeare.txt
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
  message(STATUS "${run} run:\n${output}${errors}")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "hub_generate --quick (${run} run) failed: ${result}")
  endif()
endforeach()
