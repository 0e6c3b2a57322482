//! The one reader of byte sizes given by people: `--capacity 24G` on the command line,
//! `CACHALOT_SIM_CAPACITY=80G` for the C library, and anything else that takes a size.
//!
//! A size is plain bytes (`1073741824`) or a number with a binary unit (`512M`, `24G`, `1.5T`,
//! `80GiB`, `100MB`; case-insensitive, `K`/`M`/`G`/`T` with an optional `B` or `iB`; every unit
//! is a power of 1024, as the oracle's `FAKE_CUDA_CAPACITY` reads them). Whole numbers are
//! exact up to `u64::MAX`; fractions are rounded down to whole bytes.

/// A byte size that could not be read. `Display` quotes the input and says what is valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size '{input}': {reason}; expected bytes or a number with K, M, G or T (e.g. 24G, 512M, 80GiB)"
)]
#[non_exhaustive]
pub struct ByteSizeError {
    /// The text as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Reads a byte size (see the module docs); at least 1 byte, at most `u64::MAX`.
pub fn parse_byte_size(s: &str) -> Result<u64, ByteSizeError> {
    let err = |reason: String| ByteSizeError {
        input: s.to_string(),
        reason,
    };
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(err("it does not start with a number".into()));
    }
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(err(format!("unknown unit '{}'", unit.trim()))),
    };
    let too_big = || err("must be below 16 EiB".into());
    let bytes = match num.parse::<u64>() {
        Ok(whole) => whole.checked_mul(1 << shift).ok_or_else(too_big)?,
        Err(_) => {
            let value: f64 = num
                .parse()
                .map_err(|_| err(format!("'{num}' is not a number")))?;
            let bytes = value * (1u64 << shift) as f64;
            // 2^64 itself is the first value that does not fit.
            if bytes >= 18_446_744_073_709_551_616.0 {
                return Err(too_big());
            }
            bytes as u64
        }
    };
    if bytes == 0 {
        return Err(err("must be at least 1 byte".into()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_plain_bytes() {
        let ok = |s: &str| parse_byte_size(s).unwrap();
        assert_eq!(ok("1024"), 1024);
        assert_eq!(ok("512M"), 512 << 20);
        assert_eq!(ok("512m"), 512 << 20);
        assert_eq!(ok("24G"), 24 << 30);
        assert_eq!(ok("80GiB"), 80 << 30);
        assert_eq!(ok("80 GiB"), 80 << 30);
        assert_eq!(ok("1.5g"), 3 << 29);
        assert_eq!(ok("1.5T"), 3 << 39);
        assert_eq!(ok("100MB"), 100 << 20);
        assert_eq!(ok(" 7k "), 7 << 10);
        assert_eq!(ok("16T"), 16 << 40);
        assert_eq!(ok("18446744073709551615"), u64::MAX);
        assert_eq!(ok("0.5K"), 512);
    }

    #[test]
    fn bad_sizes_quote_the_input_and_say_what_is_valid() {
        for bad in [
            "0",
            "12Q",
            "",
            "G",
            "-1G",
            "1e400",
            "lots",
            "1.2.3G",
            "0.1",
            "16777216T",
            "18446744073709551616",
            "80Gigantic",
        ] {
            let e = parse_byte_size(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
            assert!(e.contains("e.g. 24G"), "{e}");
        }
        let e = parse_byte_size("12Q").unwrap_err();
        assert_eq!(e.reason, "unknown unit 'Q'");
    }
}
