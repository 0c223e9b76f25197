# Turn a text file into a C source defining `const char SYM[]` with its contents, one
# string literal per line. Usage: cmake -DIN=file -DOUT=file.c -DSYM=name -P embed.cmake
file(READ "${IN}" text)
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "\n" "\\n\"\n    \"" text "${text}")
file(WRITE "${OUT}.tmp" "/* generated from ${IN}; do not edit */\nconst char ${SYM}[] =\n    \"${text}\";\n")
file(RENAME "${OUT}.tmp" "${OUT}")
