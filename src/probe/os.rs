//! Operating system, kernel and CPU.

/// `PRETTY_NAME` from an os-release file.
pub fn parse_os_release(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("PRETTY_NAME="))
        .map(|value| value.trim().trim_matches('"').to_string())
        .filter(|value| !value.is_empty())
}

/// (model name, logical CPU count) from /proc/cpuinfo.
pub fn parse_cpuinfo(text: &str) -> (Option<String>, u32) {
    let model = text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    });
    let count = text
        .lines()
        .filter(|line| {
            line.split_once(':')
                .is_some_and(|(key, _)| key.trim() == "processor")
        })
        .count() as u32;
    (model, count)
}

/// (OS pretty name, kernel release, CPU model, CPU count).
pub fn probe() -> (Option<String>, Option<String>, Option<String>, Option<u32>) {
    let os = ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| parse_os_release(&text));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|text| text.trim().to_string());
    let (cpu, listed) = std::fs::read_to_string("/proc/cpuinfo")
        .map(|text| parse_cpuinfo(&text))
        .unwrap_or((None, 0));
    let count = (listed > 0).then_some(listed).or_else(|| {
        std::thread::available_parallelism()
            .ok()
            .map(|n| n.get() as u32)
    });
    (os, kernel, cpu, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_and_cpuinfo() {
        assert_eq!(
            parse_os_release(
                "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"
            )
            .as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        let (model, count) = parse_cpuinfo(
            "processor\t: 0\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n",
        );
        assert_eq!(model.as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(count, 2);
    }
}
