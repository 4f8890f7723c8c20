// The AWS shared configuration: ~/.aws/credentials and ~/.aws/config (or the files that
// AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE name), the profile AWS_PROFILE picks, and the
// environment the AWS SDKs read. Read-only; a missing file is an empty one.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace ferry::detail {

/// Looks up an environment variable (getenv by default; tests pass their own).
using env_lookup = std::function<std::optional<std::string>(const std::string&)>;
env_lookup process_environment();

/// One profile's keys from both files ("region", "endpoint_url", "aws_access_key_id", ...).
struct aws_profile {
    std::string name;
    std::map<std::string, std::string> credentials;  ///< from the credentials file
    std::map<std::string, std::string> config;       ///< from the config file
    std::string credentials_path, config_path;
    /// The key from the credentials file, else from the config file, else "".
    std::string get(const std::string& key) const;
    bool exists() const { return !credentials.empty() || !config.empty(); }
};

/// The profile `name` (empty: AWS_PROFILE, else "default").
aws_profile load_aws_profile(const env_lookup& env, const std::string& name = {});

/// Parses an INI file's section `section` ("default", "profile dev"). Keys lower-cased.
std::map<std::string, std::string> read_ini_section(const std::string& path, const std::string& section);

}  // namespace ferry::detail
