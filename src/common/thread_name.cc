#include "common/thread_name.h"

#include <pthread.h>

#include <cstring>
#include <string>

namespace tessera {

void NameThisThread(const char* name) {
  // A name is only a label: failing to set one changes nothing a caller does.
  std::string cut(name, strnlen(name, 15));
  (void)pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace tessera
