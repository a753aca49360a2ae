#include <iostream>

#include "anneal/version.h"

int main() {
  std::cout << "anneal " << anneal::version() << "\n";
  return 0;
}
