/* Linked into every executable of the sanitizer build only
 * (cmake/sanitizers.cmake). Open MPI unloads its plugins (mca_*.so) with
 * dlclose at MPI_Finalize; LeakSanitizer then reports what they kept as
 * leaks "in <unknown module>", which no suppression can name. Keeping every
 * module loaded lets the reports name the library, so that lsan.supp's
 * entries (leak:mca_, ...) apply. This changes nothing but unloading at exit;
 * valgrind users of Open MPI do the same. */
#include <stddef.h>

int dlclose(void* handle) {
  (void)handle;
  return 0;
}
