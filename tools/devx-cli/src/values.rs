//! Parsing what users type: numbers, hex mailboxes, `field=value` pairs.

use std::io::Read;

use crate::CliResult;

/// Decimal or 0x-hex, up to 64 bits.
pub fn parse_number(text: &str) -> CliResult<u64> {
    let t = text.trim().replace('_', "");
    let parsed = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        t.parse::<u64>()
    };
    parsed.map_err(|_| format!("'{text}' is not a number (use decimal or 0x-hex, up to 64 bits)"))
}

/// A hex string (spaces, newlines and a 0x prefix allowed), or `-` for stdin.
pub fn parse_hex_arg(arg: &str) -> CliResult<Vec<u8>> {
    let text = if arg == "-" {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_decimal_and_hex() {
        assert_eq!(parse_number("42").unwrap(), 42);
        assert_eq!(parse_number("0x2a").unwrap(), 42);
        assert!(parse_number("0xzz").is_err());
        assert!(parse_number("-1").is_err());
    }

    #[test]
    fn hex_errors_name_the_problem() {
        assert!(parse_hex("abc").unwrap_err().contains("odd"));
        assert!(parse_hex("zz").unwrap_err().contains("not a hex digit"));
        assert_eq!(parse_hex("0x0a 0b").unwrap(), vec![10, 11]);
    }
}
