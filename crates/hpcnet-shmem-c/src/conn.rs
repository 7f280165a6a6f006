//! The simulator's end of one PE's socket (requests in, replies out, the memory file passed
//! with `shmem_init`), and the shared mapping of that file.

use crate::proto::{encode_reply, Req, REQ_BYTES};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Largest payload a request may carry (a put of at most the whole symmetric region).
const MAX_PAYLOAD: u64 = 1 << 36;

/// Real time a PE may run without a call before the job notes it (once).
const QUIET_NOTE: std::time::Duration = std::time::Duration::from_secs(20);

pub(crate) struct Conn {
    stream: UnixStream,
    /// The PE (for the note about a PE that makes no calls).
    pe: usize,
    noted: bool,
    /// The payload of the last request (reused).
    pub(crate) payload: Vec<u8>,
    /// The reply being built (reused).
    out: Vec<u8>,
}

impl Conn {
    pub(crate) fn new(stream: UnixStream, pe: usize) -> Self {
        // Reads give up after QUIET_NOTE (then the note is printed and the read goes on).
        let _ = stream.set_read_timeout(Some(QUIET_NOTE));
        Conn {
            stream,
            pe,
            noted: false,
            payload: Vec::new(),
            out: Vec::new(),
        }
    }

    /// The next request and a file descriptor passed with it; None at end of stream (the
    /// process closed its socket or ended).
    pub(crate) fn read(&mut self) -> io::Result<Option<(Req, Option<OwnedFd>)>> {
        let mut head = [0u8; REQ_BYTES];
        let (got, fd) = loop {
            match recv_with_fd(&self.stream, &mut head) {
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => self.note(),
                r => break r?,
            }
        };
        if got == 0 {
            return Ok(None);
        }
        if got < REQ_BYTES {
            self.read_full_at(&mut head, got)?;
        }
        let req = Req::decode(&head);
        if req.len > MAX_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a request announces {} payload bytes", req.len),
            ));
        }
        let mut payload = std::mem::take(&mut self.payload);
        payload.resize(req.len as usize, 0);
        let r = self.read_full_at(&mut payload, 0);
        self.payload = payload;
        r?;
        Ok(Some((req, fd)))
    }

    /// Fill `buf[from..]`, waiting as long as it takes.
    fn read_full_at(&mut self, buf: &mut [u8], mut from: usize) -> io::Result<()> {
        while from < buf.len() {
            match self.stream.read(&mut buf[from..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => from += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                    ) =>
                {
                    self.note()
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Remote writes reach a PE only while the simulator runs, that is during its calls: a PE
    /// polling memory without calls waits forever. Said once per PE.
    fn note(&mut self) {
        if !self.noted {
            self.noted = true;
            eprintln!(
                "shmem-run: note: PE {} has run for {} s of real time without a SHMEM call (a loop that polls \
                 symmetric memory must call shmem_wait_until or shmem_test to see remote writes)",
                self.pe,
                QUIET_NOTE.as_secs()
            );
        }
    }

    /// Send a reply.
    pub(crate) fn reply(&mut self, status: i64, v: [u64; 2], payload: &[u8]) -> io::Result<()> {
        self.out.clear();
        self.out
            .extend_from_slice(&encode_reply(status, v, payload.len() as u64));
        self.out.extend_from_slice(payload);
        self.stream.write_all(&self.out)
    }
}

/// `recvmsg` of up to `buf.len()` bytes, taking one descriptor passed with them (SCM_RIGHTS).
fn recv_with_fd(s: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    // Room for one descriptor's control message, aligned for cmsghdr.
    let mut ctl = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&ctl) as _;
    let n = loop {
        // SAFETY: a valid socket, and msg points at live buffers of the stated sizes.
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fd = None;
    // SAFETY: walking the control buffer the kernel filled, with its own macros.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let raw: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n, fd))
}

/// A shared, writable mapping of a PE's memory file: the bytes of its symmetric region, seen by
/// the simulated NIC and by the PE process at once. The two never run at the same time (the
/// process runs only between a reply and its next request).
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    pub(crate) fn new(fd: &OwnedFd, len: u64) -> io::Result<Mapping> {
        let size = {
            // SAFETY: fstat on a descriptor we own, into a zeroed stat.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
                return Err(io::Error::last_os_error());
            }
            st.st_size as u64
        };
        if size < len || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the memory file has {size} bytes, {len} expected"),
            ));
        }
        // SAFETY: mapping `len` bytes of a file at least that long; checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: p.cast(),
            len: len as usize,
        })
    }
}

impl hpcnet_nic::ExternalBytes for Mapping {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is live for self's lifetime and `len` bytes long.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; &mut self gives exclusive access within the simulator.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpcnet_nic::ExternalBytes;
    use std::io::{Seek, SeekFrom};

    #[test]
    fn a_mapping_is_the_file_itself() {
        let path = std::env::temp_dir().join(format!("hpcnet-shmem-c-map-{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        let fd = OwnedFd::from(f.try_clone().unwrap());
        let mut m = Mapping::new(&fd, 8192).unwrap();
        assert_eq!(m.bytes()[8191], 7, "the file's contents are seen");
        m.bytes_mut()[10] = 42;
        let mut back = [0u8; 11];
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_exact(&mut back).unwrap();
        assert_eq!(back[10], 42, "writes land in the file");
        assert!(Mapping::new(&fd, 8193).is_err(), "longer than the file");
        drop(m);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn requests_come_whole_with_their_payload_and_end_at_eof() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut conn = Conn::new(a, 0);
        let mut peer = b;
        let r = Req {
            op: crate::proto::op::PUT,
            a: [8, 1, 0, 0, 0, 0, 0],
            len: 3,
            ..Req::default()
        };
        // Header split in two writes, then the payload.
        let bytes = r.encode();
        peer.write_all(&bytes[..10]).unwrap();
        peer.write_all(&bytes[10..]).unwrap();
        peer.write_all(b"abc").unwrap();
        let (got, fd) = conn.read().unwrap().unwrap();
        assert_eq!((got, fd.is_none()), (r, true));
        assert_eq!(conn.payload, b"abc");
        conn.reply(crate::proto::OK, [5, 6], b"xy").unwrap();
        let mut rep = [0u8; crate::proto::REP_BYTES + 2];
        peer.read_exact(&mut rep).unwrap();
        assert_eq!(u64::from_ne_bytes(rep[8..16].try_into().unwrap()), 5);
        assert_eq!(&rep[32..], b"xy");
        drop(peer);
        assert!(conn.read().unwrap().is_none());
    }
}
