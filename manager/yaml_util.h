// The YAML helpers under the names manager/ has always used: they live in
// config/yaml_reader.h (one helper for every config file). This header only
// keeps topology.cc's spelling working while that file moves; new code
// includes config/yaml_reader.h. Delete it once topology.cc does too.
#ifndef NETFOLD_MANAGER_YAML_UTIL_H_
#define NETFOLD_MANAGER_YAML_UTIL_H_

#include "config/yaml_reader.h"

namespace netfold::manager {

using config::CheckKeys;
using config::ParseYaml;
using config::ReadBool;
using config::ReadString;
using config::ReadTextFile;
using config::ReadUint;
using config::YamlLine;

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_YAML_UTIL_H_
