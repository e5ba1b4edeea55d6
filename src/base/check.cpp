// Error construction for SY_CHECK / SY_FAIL.
#include "base/check.h"

namespace sy {

Error::Error(std::string message, std::source_location loc)
    : std::runtime_error(std::move(message)), where_(fmt::format("{}:{}", loc.file_name(), loc.line())) {}

void throw_error(std::string&& message, std::source_location loc) { throw Error(std::move(message), loc); }

}  // namespace sy
