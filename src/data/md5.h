// MD5 (RFC 1321) as a lowercase hex digest: Megatron names its index cache files by the MD5 of the
// dataset's description (hashlib.md5(description).hexdigest()), and so does this program. A file
// name, not a security measure.
#pragma once

#include <string>
#include <string_view>

namespace gpt {

std::string md5_hex(std::string_view data);

}  // namespace gpt
