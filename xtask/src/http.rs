//! A minimal HTTP/1.1 client on `std::net` for the container tests (xtask
//! takes no dependencies): one request per connection, a body read whole
//! or chunk by chunk as it arrives (a stream), every read bounded by
//! [`READ_TIMEOUT`].

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The longest any one read waits: a gateway that stops answering fails
/// the test instead of hanging it.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// A response whose body is still to be read.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// Header names in lower case.
    pub(crate) headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    framing: Framing,
}

#[derive(Debug)]
enum Framing {
    Chunked,
    Length(usize),
    UntilClose,
    Done,
}

/// Sends `METHOD path` to `addr` (`host:port`) with these headers and
/// body; the response once its head has arrived.
pub(crate) fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Response, String> {
    let stream = TcpStream::connect(addr).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(|e| format!("cannot set a read timeout: {e}"))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    (&stream)
        .write_all(head.as_bytes())
        .and_then(|()| (&stream).write_all(body.as_bytes()))
        .map_err(|e| format!("cannot send {method} {path} to {addr}: {e}"))?;
    let mut reader = BufReader::new(stream);
    let status_line = line(&mut reader)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP status line: {status_line:?}"))?;
    let mut headers = Vec::new();
    loop {
        let header = line(&mut reader)?;
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let framing = if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        Framing::Chunked
    } else if let Some(length) = find("content-length").and_then(|v| v.parse().ok()) {
        Framing::Length(length)
    } else {
        Framing::UntilClose
    };
    Ok(Response {
        status,
        headers,
        reader,
        framing,
    })
}

/// `GET path`, its status and whole body.
pub(crate) fn get(addr: &str, path: &str) -> Result<(u16, String), String> {
    let mut response = request(addr, "GET", path, &[], "")?;
    let body = response.text()?;
    Ok((response.status, body))
}

// === impl Response ===

impl Response {
    /// The value of header `name` (lower case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The next piece of the body as it arrives (a chunk, or what one read
    /// got); `None` at its end.
    pub(crate) fn next_piece(&mut self) -> Result<Option<Vec<u8>>, String> {
        match self.framing {
            Framing::Done => Ok(None),
            Framing::Chunked => {
                let size_line = line(&mut self.reader)?;
                let size =
                    usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                        .map_err(|e| format!("bad chunk size {size_line:?}: {e}"))?;
                if size == 0 {
                    self.framing = Framing::Done;
                    return Ok(None);
                }
                let mut chunk = vec![0; size];
                self.reader
                    .read_exact(&mut chunk)
                    .map_err(|e| format!("the body ended inside a chunk: {e}"))?;
                line(&mut self.reader)?;
                Ok(Some(chunk))
            }
            Framing::Length(left) => {
                let mut piece = vec![0; left];
                self.reader
                    .read_exact(&mut piece)
                    .map_err(|e| format!("the body ended early: {e}"))?;
                self.framing = Framing::Done;
                Ok(Some(piece))
            }
            Framing::UntilClose => {
                let mut piece = vec![0; 8192];
                let n = self
                    .reader
                    .read(&mut piece)
                    .map_err(|e| format!("cannot read the body: {e}"))?;
                if n == 0 {
                    self.framing = Framing::Done;
                    return Ok(None);
                }
                piece.truncate(n);
                Ok(Some(piece))
            }
        }
    }

    /// The rest of the body, as text.
    pub(crate) fn text(&mut self) -> Result<String, String> {
        let mut body = Vec::new();
        while let Some(piece) = self.next_piece()? {
            body.extend(piece);
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

/// One CRLF-terminated line, without its end.
fn line(reader: &mut impl BufRead) -> Result<String, String> {
    let mut text = String::new();
    match reader.read_line(&mut text) {
        Ok(0) => Err("the connection closed early".to_owned()),
        Ok(_) => Ok(text.trim_end_matches(['\r', '\n']).to_owned()),
        Err(e) => Err(format!("cannot read from the connection: {e}")),
    }
}
