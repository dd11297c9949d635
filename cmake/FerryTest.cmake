# FerryTest.cmake — ferry_add_suite, the one way tests/ and bench/ register
# a ctest entry, so that a suite's label, timeout and lock are written once
# per entry instead of as an add_test plus set_tests_properties pair.
#
#   ferry_add_suite(<name> COMMAND <exe> [args...]
#     [SUITE <check suite>]        CK_RUN_SUITE: one Check suite of <exe>
#     [EXCLUDE_TAGS <tags>]        CK_EXCLUDE_TAGS
#     [LABELS <label>...]          default: unit
#     [TIMEOUT <s>] [LOCK <resource>] [SKIP_RETURN_CODE <rc>]
#     [PASS_REGULAR_EXPRESSION <re>] [RUN_SERIAL]
#     [ENVIRONMENT <VAR=value>...])
include_guard(GLOBAL)

function(ferry_add_suite name)
  cmake_parse_arguments(PARSE_ARGV 1 A "RUN_SERIAL"
    "SUITE;EXCLUDE_TAGS;TIMEOUT;LOCK;SKIP_RETURN_CODE;PASS_REGULAR_EXPRESSION"
    "COMMAND;LABELS;ENVIRONMENT")
  if(NOT A_COMMAND)
    message(FATAL_ERROR "ferry_add_suite(${name}): no COMMAND")
  endif()
  if(A_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
      "ferry_add_suite(${name}): unknown arguments ${A_UNPARSED_ARGUMENTS}")
  endif()
  # Each argument bracket-quoted, so that an empty one (install_fit's
  # compiler flags) reaches the command instead of vanishing from the list.
  set(cmd "")
  foreach(a IN LISTS A_COMMAND)
    string(APPEND cmd " [==[${a}]==]")
  endforeach()
  cmake_language(EVAL CODE "add_test(NAME ${name} COMMAND ${cmd})")
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  set(env ${A_ENVIRONMENT})
  if(A_SUITE)
    list(PREPEND env "CK_RUN_SUITE=${A_SUITE}")
  endif()
  if(A_EXCLUDE_TAGS)
    list(PREPEND env "CK_EXCLUDE_TAGS=${A_EXCLUDE_TAGS}")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}")
  if(env)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}")
  endif()
  foreach(p TIMEOUT SKIP_RETURN_CODE PASS_REGULAR_EXPRESSION)
    if(DEFINED A_${p})
      set_tests_properties(${name} PROPERTIES ${p} "${A_${p}}")
    endif()
  endforeach()
  if(A_LOCK)
    set_tests_properties(${name} PROPERTIES RESOURCE_LOCK ${A_LOCK})
  endif()
  if(A_RUN_SERIAL)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()
