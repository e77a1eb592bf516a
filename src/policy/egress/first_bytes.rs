//! The name a connection's first bytes give, for the rules that bind a connection to a
//! name (`tls/NAME:PORT`, `http/NAME:PORT`, this module's parent): the `server_name` of a
//! TLS ClientHello, or the host an HTTP/1 request names, read from what the client sent
//! before any byte of it reaches the destination. Pure: the bytes in, a verdict out; the
//! runtime that holds the connection decides what to do with it.
//!
//! Read strictly, since what it reads is the container's: anything the standards forbid
//! and a server might read another way than this module does (two `server_name`s, an
//! extension twice, two `Host` headers, a folded header, a request target naming another
//! host than `Host`) is refused as [`FirstBytes::Other`], never resolved in its favour.

/// The most a client may send before its name is known: a ClientHello of 16 KiB (a
/// post-quantum key share and the usual extensions take 2–3), or a request head of as much.
pub const MAX_FIRST_BYTES: usize = 16 * 1024;

/// What the first bytes of a connection are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstBytes {
    /// Not enough yet to tell: read more (up to [`MAX_FIRST_BYTES`]).
    NeedMore,
    /// A TLS ClientHello: its `host_name` (lowercase), if it names one; `ech` when it carries
    /// `encrypted_client_hello`, whose inner, real name is not readable here.
    Tls { sni: Option<String>, ech: bool },
    /// An HTTP/1 request head: the host it names (lowercase, no port), if any.
    Http { host: Option<String> },
    /// Neither, or one this module refuses to read: why, in a few words.
    Other(&'static str),
}

/// Reads `buf`, the bytes a client sent first (all of them so far).
pub fn read(buf: &[u8]) -> FirstBytes {
    match buf.first() {
        None => FirstBytes::NeedMore,
        Some(0x16) => tls(buf),
        Some(b'A'..=b'Z') => http(buf),
        Some(_) => FirstBytes::Other("neither a TLS ClientHello nor an HTTP/1 request"),
    }
}

/// A bounds-checked reader over a byte slice.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.b.len() {
            return None;
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    /// A vector with a length prefix of `len_bytes` (1 or 2).
    fn vec(&mut self, len_bytes: usize) -> Option<&'a [u8]> {
        let n = if len_bytes == 1 {
            self.u8()?
        } else {
            self.u16()?
        };
        self.take(n)
    }
}

/// TLS record type of a handshake, and the handshake type of a ClientHello.
const HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 1;
const SERVER_NAME: usize = 0;
const ENCRYPTED_CLIENT_HELLO: usize = 0xfe0d;
/// A TLS record's fragment is at most 2^14 bytes (RFC 8446 5.1).
const MAX_RECORD: usize = 1 << 14;

/// The handshake message carried by the leading handshake records (a ClientHello may span
/// several), then the ClientHello in it.
fn tls(buf: &[u8]) -> FirstBytes {
    let mut records = Cursor { b: buf };
    let mut message = Vec::new();
    let want = loop {
        if message.len() >= 4 {
            let len = usize::from(message[1]) << 16
                | usize::from(message[2]) << 8
                | usize::from(message[3]);
            if message[0] != CLIENT_HELLO {
                return FirstBytes::Other("a TLS handshake that is not a ClientHello");
            }
            if len > MAX_FIRST_BYTES {
                return FirstBytes::Other("a ClientHello longer than 16 KiB");
            }
            if message.len() >= 4 + len {
                break 4 + len;
            }
        }
        let Some(header) = records.take(5) else {
            return FirstBytes::NeedMore;
        };
        if header[0] != HANDSHAKE {
            return FirstBytes::Other(
                "a TLS record that is not a handshake before the ClientHello ends",
            );
        }
        if header[1] != 3 {
            return FirstBytes::Other("a TLS record of an unknown version");
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_RECORD {
            return FirstBytes::Other("a TLS record of a length TLS forbids");
        }
        let Some(fragment) = records.take(len) else {
            return FirstBytes::NeedMore;
        };
        message.extend_from_slice(fragment);
    };
    match client_hello(&message[4..want]) {
        Some(v) => v,
        None => FirstBytes::Other("a ClientHello that does not parse"),
    }
}

/// The body of a ClientHello (RFC 8446 4.1.2; TLS 1.2's is the same up to extensions).
fn client_hello(body: &[u8]) -> Option<FirstBytes> {
    let mut c = Cursor { b: body };
    c.take(2)?; // legacy_version
    c.take(32)?; // random
    let session = c.vec(1)?;
    let suites = c.vec(2)?;
    let compression = c.vec(1)?;
    if session.len() > 32 || suites.is_empty() || suites.len() % 2 != 0 || compression.is_empty() {
        return None;
    }
    if c.b.is_empty() {
        return Some(FirstBytes::Tls {
            sni: None,
            ech: false,
        });
    }
    let mut exts = Cursor { b: c.vec(2)? };
    if !c.b.is_empty() {
        return None;
    }
    let (mut sni, mut ech, mut seen) = (None, false, Vec::new());
    while !exts.b.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec(2)?;
        if seen.contains(&kind) {
            return Some(FirstBytes::Other("a ClientHello with an extension twice"));
        }
        seen.push(kind);
        match kind {
            SERVER_NAME => match server_name(data) {
                Ok(name) => sni = Some(name),
                Err(why) => return Some(FirstBytes::Other(why)),
            },
            ENCRYPTED_CLIENT_HELLO => ech = true,
            _ => {}
        }
    }
    Some(FirstBytes::Tls { sni, ech })
}

/// The one `host_name` of a `server_name` extension (RFC 6066 3).
fn server_name(data: &[u8]) -> Result<String, &'static str> {
    const BAD: &str = "a server_name extension that does not parse";
    let mut c = Cursor { b: data };
    let mut list = Cursor {
        b: c.vec(2).ok_or(BAD)?,
    };
    if !c.b.is_empty() {
        return Err(BAD);
    }
    let mut name = None;
    while !list.b.is_empty() {
        let kind = list.u8().ok_or(BAD)?;
        let value = list.vec(2).ok_or(BAD)?;
        if kind != 0 {
            return Err("a server_name of another type than host_name");
        }
        if name.is_some() {
            return Err("a ClientHello with two server names");
        }
        name = Some(host_name(value).ok_or("a server_name that is not a host name")?);
    }
    name.ok_or(BAD)
}

/// `value` as a host name, lowercase: letters, digits, `-` and `.`, at most 253 bytes,
/// one trailing dot dropped; no IPv4 literal (a name rule binds names; IPv6 ones have
/// colons and brackets, refused with them).
fn host_name(value: &[u8]) -> Option<String> {
    let v = value.strip_suffix(b".").unwrap_or(value);
    let ok = !v.is_empty()
        && v.len() <= 253
        && v.iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
        && !v.starts_with(b".")
        && !v.windows(2).any(|w| w == b"..");
    let name = ok.then(|| String::from_utf8_lossy(v).to_ascii_lowercase())?;
    name.parse::<std::net::Ipv4Addr>().is_err().then_some(name)
}

/// An HTTP/1 request head (RFC 9112): its request line and headers, up to the blank line.
fn http(buf: &[u8]) -> FirstBytes {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() >= MAX_FIRST_BYTES {
            return FirstBytes::Other("an HTTP/1 request head longer than 16 KiB");
        }
        // A method is a token followed by a space: wait only for what could become one.
        let token = buf.iter().take_while(|b| b.is_ascii_uppercase()).count();
        return match buf.get(token) {
            None if token <= 16 => FirstBytes::NeedMore,
            Some(b' ') if (1..=16).contains(&token) => FirstBytes::NeedMore,
            _ => FirstBytes::Other("neither a TLS ClientHello nor an HTTP/1 request"),
        };
    };
    if end + 4 > MAX_FIRST_BYTES {
        return FirstBytes::Other("an HTTP/1 request head longer than 16 KiB");
    }
    let Ok(head) = std::str::from_utf8(&buf[..end]) else {
        return FirstBytes::Other("an HTTP/1 request head that is not text");
    };
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return FirstBytes::Other("an HTTP/1 request line that does not parse");
    };
    // As the partial read above accepts one: 1 to 16 capital letters.
    if !(1..=16).contains(&method.len()) || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return FirstBytes::Other("an HTTP/1 request line that does not parse");
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return FirstBytes::Other("a request of another HTTP version than 1.0 or 1.1");
    }
    if method == "CONNECT" {
        return FirstBytes::Other("an HTTP CONNECT (a tunnel to any host)");
    }
    let mut host = None;
    // A bare CR or LF ends a line for some servers and not for others: a Host this module
    // never saw could hide behind one.
    if head
        .split("\r\n")
        .any(|l| l.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f))
    {
        return FirstBytes::Other("a control character (a bare CR or LF) in an HTTP head");
    }
    for field in lines {
        if field.starts_with([' ', '\t']) {
            return FirstBytes::Other("a folded HTTP header line");
        }
        let Some((name, value)) = field.split_once(':') else {
            return FirstBytes::Other("an HTTP header line without a colon");
        };
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return FirstBytes::Other("an HTTP header name that is not a token");
        }
        if name.eq_ignore_ascii_case("host") {
            if host.is_some() {
                return FirstBytes::Other("an HTTP request with two Host headers");
            }
            match authority_host(value.trim_matches([' ', '\t'])) {
                Some(h) => host = Some(h),
                None => return FirstBytes::Other("a Host header that is not a host name"),
            }
        }
    }
    // The absolute form names the host the server uses; it must be the one `Host` names.
    if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let Some(named) = authority_host(authority) else {
            return FirstBytes::Other("a request target whose host is not a host name");
        };
        match &host {
            Some(h) if *h != named => {
                return FirstBytes::Other("a request target naming another host than Host")
            }
            _ => host = Some(named),
        }
    } else if !target.starts_with('/') && target != "*" {
        return FirstBytes::Other("a request target of another form than origin or absolute");
    }
    FirstBytes::Http { host }
}

/// The host of an `authority` (`host[:port]`, no user info), as [`host_name`] reads it.
fn authority_host(authority: &str) -> Option<String> {
    if authority.contains('@') {
        return None;
    }
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        Some(_) => return None,
        None => authority,
    };
    host_name(host.as_bytes())
}

/// RFC 9110's `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello record with these extensions (type, data), as a client builds it.
    fn hello(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // one suite
        body.extend([1, 0]); // null compression
        let mut ext = Vec::new();
        for (kind, data) in exts {
            ext.extend(kind.to_be_bytes());
            ext.extend(u16::try_from(data.len()).unwrap().to_be_bytes());
            ext.extend(data);
        }
        body.extend(u16::try_from(ext.len()).unwrap().to_be_bytes());
        body.extend(ext);
        let mut msg = vec![CLIENT_HELLO];
        msg.extend(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
        msg.extend(body);
        msg
    }

    fn records(msg: &[u8], chunk: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for part in msg.chunks(chunk) {
            out.extend([HANDSHAKE, 3, 1]);
            out.extend(u16::try_from(part.len()).unwrap().to_be_bytes());
            out.extend(part);
        }
        out
    }

    fn sni(names: &[&[u8]]) -> Vec<u8> {
        let mut list = Vec::new();
        for n in names {
            list.push(0);
            list.extend(u16::try_from(n.len()).unwrap().to_be_bytes());
            list.extend(*n);
        }
        let mut d = u16::try_from(list.len()).unwrap().to_be_bytes().to_vec();
        d.extend(list);
        d
    }

    #[test]
    fn a_client_hello_gives_its_name_whole_split_or_in_records() {
        let msg = hello(&[(10, vec![0, 2, 0, 29]), (0, sni(&[b"API.a.test."]))]);
        let want = FirstBytes::Tls {
            sni: Some("api.a.test".into()),
            ech: false,
        };
        for chunk in [msg.len(), 7, 1] {
            let wire = records(&msg, chunk);
            assert_eq!(read(&wire), want, "records of {chunk}");
            // Every proper prefix (a ClientHello split across segments) asks for more.
            for cut in 0..wire.len() {
                assert_eq!(read(&wire[..cut]), FirstBytes::NeedMore, "cut at {cut}");
            }
        }
        let no_name = records(&hello(&[(10, vec![0, 2, 0, 29])]), 1000);
        assert_eq!(
            read(&no_name),
            FirstBytes::Tls {
                sni: None,
                ech: false
            }
        );
        let ech = records(
            &hello(&[(0, sni(&[b"cover.test"])), (0xfe0d, vec![0])]),
            1000,
        );
        assert_eq!(
            read(&ech),
            FirstBytes::Tls {
                sni: Some("cover.test".into()),
                ech: true
            }
        );
    }

    #[test]
    fn what_a_server_might_read_otherwise_is_refused() {
        let other = |wire: &[u8]| matches!(read(wire), FirstBytes::Other(_));
        let two_names = hello(&[(0, sni(&[b"a.test", b"b.test"]))]);
        assert!(other(&records(&two_names, 1000)));
        let twice = hello(&[(0, sni(&[b"a.test"])), (0, sni(&[b"b.test"]))]);
        assert!(other(&records(&twice, 1000)));
        for bad in [
            &b"a..test"[..],
            b"a test",
            b"a.test\0",
            b"",
            b"[::1]",
            b"\xc3\xa9.test",
        ] {
            assert!(
                other(&records(&hello(&[(0, sni(&[bad]))]), 1000)),
                "{bad:?}"
            );
        }
        // A record of another type in the middle of the ClientHello.
        let mut wire = records(&hello(&[(0, sni(&[b"a.test"]))]), 10);
        wire[15] = 0x17;
        assert!(other(&wire));
        // A handshake that is not a ClientHello, and one claiming more than 16 KiB.
        let mut m = hello(&[]);
        m[0] = 2;
        assert!(other(&records(&m, 1000)));
        assert!(other(&[HANDSHAKE, 3, 1, 0, 4, CLIENT_HELLO, 1, 0, 0]));
        assert!(other(b"\x00\x01garbage"));
    }

    #[test]
    fn an_http_request_gives_its_host() {
        let host = |h: &str| FirstBytes::Http {
            host: Some(h.into()),
        };
        assert_eq!(
            read(b"GET / HTTP/1.1\r\nHost: A.test:8080\r\nAccept: */*\r\n\r\n"),
            host("a.test")
        );
        assert_eq!(
            read(b"GET http://a.test/x HTTP/1.1\r\nhost: a.test\r\n\r\n"),
            host("a.test")
        );
        assert_eq!(
            read(b"GET http://a.test/x HTTP/1.0\r\n\r\n"),
            host("a.test")
        );
        assert_eq!(
            read(b"GET / HTTP/1.0\r\n\r\n"),
            FirstBytes::Http { host: None }
        );
        let whole = b"POST /u HTTP/1.1\r\nHost: a.test\r\n\r\nbody";
        for cut in 0..whole.len() - 4 {
            assert_eq!(read(&whole[..cut]), FirstBytes::NeedMore, "cut at {cut}");
        }
    }

    #[test]
    fn an_http_request_that_could_name_two_hosts_is_refused() {
        for bad in [
            &b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"[..],
            b"GET http://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a.test\r\n b.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost : a.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: user@a.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: 10.0.0.1:80:80\r\n\r\n",
            b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"GET / HTTP/2.0\r\nHost: a.test\r\n\r\n",
            b"GET a.test HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"GET  / HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"SSH-2.0-OpenSSH\r\n",
            b"get / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: y\nHost: b.test\r\nHost: a.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a.test\rHost: b.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n",
        ] {
            assert!(
                matches!(read(bad), FirstBytes::Other(_)),
                "{:?}: {:?}",
                String::from_utf8_lossy(bad),
                read(bad)
            );
        }
        let long = [b'G'; MAX_FIRST_BYTES];
        assert!(matches!(read(&long), FirstBytes::Other(_)));
    }
}
