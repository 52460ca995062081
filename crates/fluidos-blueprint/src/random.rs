//! Where the Sprig random functions (`randAlphaNum`, `uuidv4`, ...) get their bytes.
//!
//! Injectable so tests are deterministic; production uses [`OsRandom`], the
//! operating system's CSPRNG (what Sprig's `crypto/rand` reads on the Go node).

/// A source of random bytes for one rendering.
pub trait RandomSource {
    /// Fills `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable>;
}

/// The random source could not deliver bytes (e.g. the OS CSPRNG failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no random bytes available: {0}")]
pub struct RandomUnavailable(pub String);

/// The operating system's CSPRNG (`getrandom`); the production source.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsRandom;

impl RandomSource for OsRandom {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable> {
        getrandom::fill(buf).map_err(|e| RandomUnavailable(e.to_string()))
    }
}

/// Deterministic bytes for tests: `bytes` repeated forever.
///
/// Not random at all; never use it outside tests.
#[derive(Debug, Clone)]
pub struct RepeatingBytes {
    bytes: Vec<u8>,
    next: usize,
}

impl RepeatingBytes {
    /// A source that yields `bytes`, then `bytes` again, and so on (`[0]` if empty).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        let mut bytes = bytes.into();
        if bytes.is_empty() {
            bytes.push(0);
        }
        Self { bytes, next: 0 }
    }
}

impl RandomSource for RepeatingBytes {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable> {
        for b in buf.iter_mut() {
            *b = self.bytes[self.next];
            self.next = (self.next + 1) % self.bytes.len();
        }
        Ok(())
    }
}

/// `count` characters drawn uniformly from `alphabet` (at most 256 entries).
///
/// Rejection sampling: a byte is used only when it falls below the largest
/// multiple of the alphabet size, so no character is favoured (modulo bias).
pub(crate) fn sample_chars(
    source: &mut dyn RandomSource,
    alphabet: &[u8],
    count: usize,
) -> Result<String, RandomUnavailable> {
    let size = alphabet.len();
    if size == 0 || count == 0 {
        return Ok(String::new());
    }
    let limit = 256 - 256 % size;
    let mut out = String::with_capacity(count);
    let mut buf = [0u8; 64];
    while out.len() < count {
        source.fill(&mut buf)?;
        for &b in &buf {
            if usize::from(b) < limit && out.len() < count {
                out.push(char::from(alphabet[usize::from(b) % size]));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeating_bytes_cycle() {
        let mut r = RepeatingBytes::new([1, 2, 3]);
        let mut buf = [0u8; 7];
        r.fill(&mut buf).unwrap();
        assert_eq!(buf, [1, 2, 3, 1, 2, 3, 1]);
    }

    #[test]
    fn sampling_skips_bytes_that_would_bias_the_result() {
        // Alphabet of 62: bytes >= 248 are rejected, the rest map by modulo.
        let alphabet = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut r = RepeatingBytes::new([250, 0, 61, 62, 255, 247]);
        let s = sample_chars(&mut r, alphabet, 4).unwrap();
        assert_eq!(s, "0Z0Z");
    }

    #[test]
    fn os_random_fills() {
        let mut buf = [0u8; 32];
        OsRandom.fill(&mut buf).unwrap();
        assert_ne!(buf, [0u8; 32]);
    }
}
