//! Parsing what users type: numbers, hex mailboxes, `field=value` pairs.

use std::io::Read;

use crate::CliResult;

/// Decimal or 0x-hex, up to 64 bits.
pub fn parse_number(text: &str) -> CliResult<u64> {
    let t = text.trim().replace('_', "");
    let parsed = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') && t.bytes().all(|b| b.is_ascii_digit()) {
        // `0800` is an opcode typed without its 0x far more often than a decimal 800.
        return Err(format!(
            "'{text}' has a leading zero: write 0x{} for hex or {} for decimal",
            t.trim_start_matches('0'),
            t.trim_start_matches('0').parse::<u64>().unwrap_or(0)
        ));
    } else {
        t.parse::<u64>()
    };
    parsed.map_err(|_| format!("'{text}' is not a number (use decimal or 0x-hex, up to 64 bits)"))
}

/// A hex string (spaces, newlines and a 0x prefix allowed), or `-` for stdin.
pub fn parse_hex_arg(arg: &str) -> CliResult<Vec<u8>> {
    let text = if arg == "-" {
        crate::session::stdin_available()?;
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| format!("reading hex from stdin: {e}"))?;
        s
    } else {
        arg.to_string()
    };
    parse_hex(&text)
}

pub fn parse_hex(text: &str) -> CliResult<Vec<u8>> {
    let mut clean: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if let Some(rest) = clean.strip_prefix("0x") {
        clean = rest.to_string();
    }
    if clean.is_empty() {
        return Err("no hex given".into());
    }
    if let Some((i, c)) = clean.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(format!("'{c}' at position {i} is not a hex digit"));
    }
    if !clean.len().is_multiple_of(2) {
        return Err(format!(
            "hex has an odd number of digits ({}); each byte needs two",
            clean.len()
        ));
    }
    hex::decode(&clean).map_err(|e| format!("bad hex: {e}"))
}

/// Splits `name=value`.
pub fn split_assignment(arg: &str) -> CliResult<(&str, &str)> {
    arg.split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| format!("'{arg}' is not of the form field=value"))
}

/// Splits every `name=value`, refusing a field given twice.
pub fn split_assignments(args: &[String]) -> CliResult<Vec<(&str, &str)>> {
    let mut out: Vec<(&str, &str)> = Vec::with_capacity(args.len());
    for a in args {
        let (name, value) = split_assignment(a)?;
        if let Some((_, first)) = out.iter().find(|(n, _)| *n == name) {
            return Err(format!(
                "field {name} is given twice ({name}={first} and {name}={value})"
            ));
        }
        out.push((name, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_decimal_and_hex() {
        assert_eq!(parse_number("42").unwrap(), 42);
        assert_eq!(parse_number("0x2a").unwrap(), 42);
        assert!(parse_number("0xzz").is_err());
        assert!(parse_number("-1").is_err());
        assert_eq!(parse_number("0").unwrap(), 0);
        let e = parse_number("0800").unwrap_err();
        assert!(e.contains("leading zero") && e.contains("0x800"), "{e}");
    }

    #[test]
    fn a_field_given_twice_is_refused() {
        let args = ["a=1".to_string(), "b=2".to_string(), "a=3".to_string()];
        let e = split_assignments(&args).unwrap_err();
        assert!(e.contains("field a is given twice"), "{e}");
        assert_eq!(split_assignments(&args[..2]).unwrap().len(), 2);
    }

    #[test]
    fn hex_errors_name_the_problem() {
        assert!(parse_hex("abc").unwrap_err().contains("odd"));
        assert!(parse_hex("zz").unwrap_err().contains("not a hex digit"));
        assert_eq!(parse_hex("0x0a 0b").unwrap(), vec![10, 11]);
    }

    proptest::proptest! {
        #[test]
        fn numbers_read_back_in_both_bases(n: u64) {
            proptest::prop_assert_eq!(parse_number(&n.to_string()).unwrap(), n);
            proptest::prop_assert_eq!(parse_number(&format!("{n:#x}")).unwrap(), n);
        }

        #[test]
        fn hex_reads_back(bytes in proptest::collection::vec(proptest::num::u8::ANY, 1..64)) {
            proptest::prop_assert_eq!(parse_hex(&hex::encode(&bytes)).unwrap(), bytes);
        }
    }
}
