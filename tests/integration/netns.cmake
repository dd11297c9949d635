# netns.cmake — registers placement_netns (issue 4): latency-aware placement
# over network namespaces with one server's link 10x slower. Needs root; the
# script exits 77 (skipped) without it. Include from
# tests/integration/CMakeLists.txt: include(${CMAKE_CURRENT_LIST_DIR}/netns.cmake)
ferry_add_suite(placement_netns
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/placement_netns.sh
          $<TARGET_FILE:ps-server> $<TARGET_FILE:trainer>
  LABELS integration SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL)

# codec_auto_netns (issue 14): codec "auto" over mixed links (one trainer at
# 1gbit, one at 20mbit): the slow link's push codec is the more compressed.
ferry_add_suite(codec_auto_netns
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/codec_auto_netns.sh ${PROJECT_BINARY_DIR}
  LABELS integration SKIP_RETURN_CODE 77 TIMEOUT 180 RUN_SERIAL)
