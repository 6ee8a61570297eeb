//! The newest glibc symbol version an ELF binary needs (its `.gnu.version_r`
//! entries against libc/libm/libpthread…), to refuse putting a host-built
//! envgen into a base whose glibc is older.

use crate::error::{Result, UserError};

/// A `major.minor` glibc version.
pub type GlibcVersion = (u32, u32);

/// Parse "2.36" / "GLIBC_2.36" / "ldd (Debian GLIBC 2.36-9) 2.36" (last token) into (2, 36).
pub fn parse_glibc(text: &str) -> Option<GlibcVersion> {
    let token = text.split_whitespace().last()?;
    let token = token.strip_prefix("GLIBC_").unwrap_or(token);
    let mut parts = token.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.split('-').next()?.parse().ok()?;
    Some((major, minor))
}

/// The highest `GLIBC_x.y` version the binary requires; `None` for a static binary.
pub fn required_glibc(data: &[u8]) -> Result<Option<GlibcVersion>> {
    use object::read::elf::FileHeader as _;
    let not_elf = |err: object::read::Error| -> anyhow::Error {
        UserError::usage(format!(
            "the envgen binary is not a readable 64-bit ELF file: {err}"
        ))
        .with_fix("pass a Linux x86_64/aarch64 build of envgen with --binary PATH")
        .into()
    };
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data).map_err(not_elf)?;
    let endian = header.endian().map_err(not_elf)?;
    let sections = header.sections(endian, data).map_err(not_elf)?;
    let Some((mut needs, link)) = sections.gnu_verneed(endian, data).map_err(not_elf)? else {
        return Ok(None);
    };
    let strings = sections.strings(endian, data, link).map_err(not_elf)?;
    let mut newest: Option<GlibcVersion> = None;
    while let Some((_need, mut aux)) = needs.next().map_err(not_elf)? {
        while let Some(entry) = aux.next().map_err(not_elf)? {
            let name = entry.name(endian, strings).map_err(not_elf)?;
            let name = String::from_utf8_lossy(name);
            if let Some(version) = name.strip_prefix("GLIBC_").and_then(parse_glibc) {
                newest = newest.max(Some(version));
            }
        }
    }
    Ok(newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_glibc_spellings() {
        assert_eq!(parse_glibc("2.36"), Some((2, 36)));
        assert_eq!(parse_glibc("GLIBC_2.2.5"), Some((2, 2)));
        assert_eq!(
            parse_glibc("ldd (Debian GLIBC 2.36-9+deb12u4) 2.36"),
            Some((2, 36))
        );
        assert_eq!(parse_glibc("nonsense"), None);
    }

    #[test]
    fn this_test_binary_needs_some_glibc() {
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let needed = required_glibc(&data)
            .unwrap()
            .expect("dynamically linked test binary");
        assert!(((2, 2)..(3, 0)).contains(&needed), "{needed:?}");
    }

    #[test]
    fn garbage_is_a_usage_error() {
        assert!(required_glibc(b"not an elf").is_err());
    }
}
