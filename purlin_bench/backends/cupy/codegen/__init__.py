"""Code generation: a Program lowered to the interpreter's step table, or to CUDA C++ of its own.

lower.py makes the step table atoms/snac.cu interprets (and a variable
program's size table); compiled.py generates a launch's own source; atoms.py
reads the Atom sources and builds them. Nothing here holds device memory."""
