//! The one rule for secrets in what envgen records or shows (issue #40):
//! a variable whose name looks like a secret keeps its name and loses its
//! value (`<set>`), and the user:password part of a URL
//! (`https://user:pw@mirror`) becomes `<redacted>` in every other value.
//! Applied when a command's record is captured and again when a manifest is
//! read, so runs recorded by an older envgen are not shown in clear by
//! `runs show`, `runs compare` or the reports either.

use std::collections::BTreeMap;

/// A name containing one of these (case-insensitive) is a secret. By
/// pattern, not by a list of known variables: `HF_CREDENTIAL`,
/// `HF_HUB_AUTH` and `TORCH_PASSWD` are as secret as `HF_TOKEN`.
/// Documented in docs/running.md ("What is recorded").
pub const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "KEY",
    "SECRET",
    "PASSW", // PASSWORD, PASSWD
    "PASSPHRASE",
    "PWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "SIGNATURE",
];

/// What a secret variable's value is recorded as.
pub const SET: &str = "<set>";
/// What the userinfo of a URL is recorded as.
pub const REDACTED: &str = "<redacted>";

/// Whether `name` looks like the name of a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_WORDS.iter().any(|w| upper.contains(w))
}

/// The value of variable `name` as it may be recorded.
pub fn env_value(name: &str, value: &str) -> String {
    if is_secret_name(name) {
        SET.to_string()
    } else {
        userinfo(value)
    }
}

/// Every variable of `env` as it may be recorded.
pub fn env(env: BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.into_iter()
        .map(|(name, value)| {
            let value = env_value(&name, &value);
            (name, value)
        })
        .collect()
}

/// `text` with the userinfo of every URL in it (`scheme://USER:PW@host`)
/// replaced by `<redacted>`; the scheme and host stay, so a record still
/// says which mirror was used.
pub fn userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the path, query, fragment or a separator.
        let end = tail
            .find(|c: char| {
                matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == ',' || c == ';'
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(i) if i > 0 => {
                out.push_str(REDACTED);
                out.push_str(&authority[i..]);
                rest = &tail[end..];
            }
            // Nothing to hide: go on from right after `://`, so that a URL
            // starting inside this authority (`x://https://u:p@h`) is seen.
            _ => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_found_by_pattern() {
        for name in [
            "HF_TOKEN",
            "HF_CREDENTIAL",
            "HF_HUB_AUTH",
            "TORCH_PASSWD",
            "CUDA_PASSWORD",
            "nccl_api_key",
            "HF_SESSION_COOKIE",
            "TORCH_PRIVATE_THING",
        ] {
            assert!(is_secret_name(name), "{name}");
            assert_eq!(env_value(name, "hunter2"), SET, "{name}");
        }
        for name in ["HF_HOME", "CUDA_VISIBLE_DEVICES", "NCCL_IB_DISABLE"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn the_userinfo_of_urls_is_redacted_and_the_rest_kept() {
        let cases = [
            ("https://user:pw@mirror", "https://<redacted>@mirror"),
            (
                "https://user:pw@mirror.example/a/b?x=1",
                "https://<redacted>@mirror.example/a/b?x=1",
            ),
            ("https://mirror.example/u@x", "https://mirror.example/u@x"),
            (
                "a=http://u@h1,b=ftp://u:p:q@h2:21/x",
                "a=http://<redacted>@h1,b=ftp://<redacted>@h2:21/x",
            ),
            ("no url here", "no url here"),
            ("user@host", "user@host"),
            ("weird://@host", "weird://@host"),
            ("s://a@b s://c:d@e", "s://<redacted>@b s://<redacted>@e"),
        ];
        for (given, want) in cases {
            assert_eq!(userinfo(given), want, "{given}");
            assert_eq!(env_value("HF_ENDPOINT", given), want, "{given}");
        }
    }

    /// Generated values: whatever surrounds it, the password never survives.
    #[test]
    fn no_generated_url_keeps_its_password() {
        let prefixes = ["", "x=", "a b ", "http://h/", "\t", "://"];
        let suffixes = ["", "/p", "?q=1", "#f", " tail", ",next", ":8080/x"];
        let schemes = ["https", "http", "s3", "git+ssh"];
        for p in prefixes {
            for s in suffixes {
                for scheme in schemes {
                    let v = format!("{p}{scheme}://alice:Pa55w0rd@host.example{s}");
                    let r = userinfo(&v);
                    assert!(
                        !r.contains("Pa55w0rd") && !r.contains("alice"),
                        "{v} -> {r}"
                    );
                    assert!(r.contains("host.example"), "{v} -> {r}");
                }
            }
        }
    }
}
