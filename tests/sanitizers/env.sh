# Sourced by scripts/sanitize.sh: the runtime options of the sanitizer build.
# Every report fails the test (halt_on_error / abort_on_error): a test cannot
# pass with a report printed and ignored.
# fast_unwind_on_malloc=0: the system libraries (Open MPI, glibc's vasprintf)
# are built without frame pointers, so the fast unwinder stops at their first
# frame ("<unknown module>") and no suppression can name them; the slow one
# (DWARF) reaches the library that allocated.
_st_sanitizers_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1:detect_odr_violation=0:fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$_st_sanitizers_dir/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="suppressions=$_st_sanitizers_dir/ubsan.supp:print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="suppressions=$_st_sanitizers_dir/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
