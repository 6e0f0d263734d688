# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
# Fails unless README.md holds EXAMPLE verbatim (without its two SPDX lines) in a ```cpp block.
file(READ ${README} readme)
file(READ ${EXAMPLE} example)
string(REGEX REPLACE "^// SPDX-FileCopyrightText:[^\n]*\n// SPDX-License-Identifier:[^\n]*\n" ""
       example "${example}")
string(FIND "${readme}" "```cpp\n${example}```" where)
if(where EQUAL -1)
  message(FATAL_ERROR "README.md does not contain examples/quick_start/quick_start.cpp verbatim")
endif()
