//! Python's readings of strings, where the original (Python) and the
//! engines it composes (Python too) read a value: the same text must mean
//! the same number here.

/// Python `int()` of a string: surrounding whitespace, one sign, and single
/// `_` between digits are accepted (`" 1_0 "` is 10, `"+2"` is 2); anything
/// else (`"1.0"`, `"0x1"`, `"1__0"`, `""`) is not an integer.
pub fn int(text: &str) -> Option<i64> {
    let t = text.trim();
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    let n: i64 = digits.replace('_', "").parse().ok()?;
    Some(if negative { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_like_python_int() {
        assert_eq!(int("3"), Some(3));
        assert_eq!(int(" 1_0 "), Some(10));
        assert_eq!(int(" 8002"), Some(8002));
        assert_eq!(int("3_2"), Some(32));
        assert_eq!(int("+2"), Some(2));
        assert_eq!(int("-1"), Some(-1));
        for bad in ["", " ", "x", "1__0", "_1", "1_", "1.0", "0x1", "$(PORT)"] {
            assert_eq!(int(bad), None, "{bad}");
        }
    }
}
