// Which paths of a store an object-store Env keeps as objects: the files
// directly inside chosen subdirectories of the store's directory.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace ckptfs::io {

// "D/NAME" for path ROOT/D/NAME where D is one of `dirs` and NAME holds no
// '/' and no '@' (kept for the names of an object's other objects); "" for
// every other path. `root` has no trailing '/'.
inline std::string StoreObjectName(const std::string& root, const std::vector<std::string>& dirs,
                                   const std::string& path) {
  if (path.size() <= root.size() + 1 || path.compare(0, root.size(), root) != 0 ||
      path[root.size()] != '/') {
    return "";
  }
  const std::string rel = path.substr(root.size() + 1);
  const size_t slash = rel.find('/');
  if (slash == std::string::npos || slash + 1 == rel.size()) return "";
  if (std::find(dirs.begin(), dirs.end(), rel.substr(0, slash)) == dirs.end()) return "";
  if (rel.find('/', slash + 1) != std::string::npos || rel.find('@') != std::string::npos) {
    return "";
  }
  return rel;
}

}  // namespace ckptfs::io
