//! The kernel's list format (`0-3,7`, as `cpuset.cpus` and `Cpus_allowed_list` print it)
//! read into the bitmask `sched_setaffinity(2)` and `set_mempolicy(2)` take: one bit per
//! CPU or memory node, in native `unsigned long` words.

/// The highest CPU or node number moat accepts: the kernel's own ceiling (`NR_CPUS` is at
/// most 8192 on x86-64, `MAX_NUMNODES` at most 1024), so a list is never a mask the size
/// of whatever number it names.
pub const MAX_INDEX: usize = 8191;

const WORD_BITS: usize = libc::c_ulong::BITS as usize;

/// Why a list was refused (the caller names the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    #[error("{0:?} is not a number or a range (a list is like \"0-3,7\")")]
    Item(String),
    #[error("range {0:?} ends before it starts")]
    Reversed(String),
    #[error("{0} is above {MAX_INDEX}, the largest number the kernel has")]
    TooLarge(usize),
}

/// The set bits of `list`, as words. Blanks around items are allowed (the schema's pattern
/// is `^[0-9, -]*$`); an empty list (or only blanks) is an empty mask.
pub fn parse(list: &str) -> Result<Vec<libc::c_ulong>, ListError> {
    let mut words: Vec<libc::c_ulong> = Vec::new();
    for item in list.split(',').map(str::trim) {
        if item.is_empty() {
            if list.trim().is_empty() {
                continue;
            }
            return Err(ListError::Item(item.to_string()));
        }
        let number = |s: &str| -> Result<usize, ListError> {
            let s = s.trim();
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ListError::Item(item.to_string()));
            }
            let n: usize = s.parse().map_err(|_| ListError::TooLarge(usize::MAX))?;
            if n > MAX_INDEX {
                return Err(ListError::TooLarge(n));
            }
            Ok(n)
        };
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(item)?;
                (n, n)
            }
        };
        if hi < lo {
            return Err(ListError::Reversed(item.to_string()));
        }
        if words.len() <= hi / WORD_BITS {
            words.resize(hi / WORD_BITS + 1, 0);
        }
        for bit in lo..=hi {
            words[bit / WORD_BITS] |= 1 << (bit % WORD_BITS);
        }
    }
    Ok(words)
}

/// How many bits of `mask` are set.
pub fn count(mask: &[libc::c_ulong]) -> u32 {
    mask.iter().map(|w| w.count_ones()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_become_masks() {
        assert_eq!(parse("").unwrap(), Vec::<libc::c_ulong>::new());
        assert_eq!(parse("  ").unwrap(), Vec::<libc::c_ulong>::new());
        assert_eq!(parse("0").unwrap(), vec![1]);
        assert_eq!(parse("0-3,7").unwrap(), vec![0b1000_1111]);
        assert_eq!(parse("1, 3 - 4").unwrap(), vec![0b11010]);
        let m = parse("64").unwrap();
        assert_eq!(m, vec![0, 1]);
        assert_eq!(count(&parse("0-9,100").unwrap()), 11);
        assert_eq!(parse(&MAX_INDEX.to_string()).unwrap().len(), 8192 / 64);
    }

    #[test]
    fn bad_lists_are_refused() {
        assert_eq!(parse("a"), Err(ListError::Item("a".into())));
        assert_eq!(parse("1,,2"), Err(ListError::Item(String::new())));
        assert_eq!(parse("3-1"), Err(ListError::Reversed("3-1".into())));
        assert_eq!(parse("8192"), Err(ListError::TooLarge(8192)));
        assert_eq!(parse("0-"), Err(ListError::Item("0-".into())));
        assert!(parse("99999999999999999999999").is_err());
    }
}
