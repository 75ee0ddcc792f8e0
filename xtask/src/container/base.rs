//! Images made locally, without a registry: a root assembled from host
//! files under `target/container/bases/<name>/`, packed with a fixed
//! owner and time (so the same content packs to the same bytes) and
//! imported with `podman import`, tagged by a hash of what went in.

use std::hash::Hasher;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Podman, find_on_path, output};

/// What goes into an image made by [`Podman::make_base`]. Paths in the
/// image are absolute (`/usr/bin/redis-server`).
#[derive(Debug, Default, Clone)]
pub(crate) struct Base {
    /// The image's name (`localhost/<name>:<content hash>`).
    pub(crate) name: String,
    /// Host executables, each copied with the shared libraries `ldd` lists
    /// for it (at the paths `ldd` resolved): (host path, path in the image).
    pub(crate) binaries: Vec<(PathBuf, String)>,
    /// Host files copied as they are (a symlink's target is copied):
    /// (host path, path in the image).
    pub(crate) files: Vec<(PathBuf, String)>,
    /// Files written with this text: (path in the image, text).
    pub(crate) written: Vec<(String, String)>,
    /// Empty directories anyone may write to (mode 1777: the image's
    /// files all belong to root), such as `/tmp` or a data directory.
    pub(crate) writable_dirs: Vec<String>,
    /// The host's top-level links into `/usr` (`/bin`, `/lib`, `/lib64`…
    /// on a usr-merged system), an empty `/usr` to mount the host's over
    /// (`--volume /usr:/usr:ro`), and the `/etc` files programs from it
    /// need: the loader's cache, `/etc/alternatives` (where `cc` and `awk`
    /// point), the CA bundle.
    pub(crate) host_usr: bool,
    /// `podman import --change` instructions: `ENV K=V`, `USER 1:1`,
    /// `WORKDIR /d`, `ENTRYPOINT [..]`, `CMD [..]`, `EXPOSE 80`.
    pub(crate) changes: Vec<String>,
}

/// The top-level directories a usr-merged system links into `/usr`.
const USR_LINKS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

// === impl Base ===

impl Base {
    /// An empty image named `name`, with a `/tmp`.
    pub(crate) fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            writable_dirs: vec!["/tmp".to_owned()],
            ..Self::default()
        }
    }

    /// An image that runs programs of the host's `/usr`, mounted over it
    /// with `--volume /usr:/usr:ro`: see [`Base::host_usr`](field@Base::host_usr).
    pub(crate) fn host_usr(name: &str) -> Self {
        let mut base = Self::new(name);
        base.host_usr = true;
        base.written.push((
            "/etc/passwd".to_owned(),
            "root:x:0:0:root:/root:/bin/sh\n".to_owned(),
        ));
        base.written
            .push(("/etc/group".to_owned(), "root:x:0:\n".to_owned()));
        base.changes
            .push("ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin".to_owned());
        base
    }
}

// === impl Podman ===

impl Podman {
    /// Imports the image `base` describes, unless an image of the same
    /// content exists; its tag.
    pub(crate) fn make_base(&self, base: &Base) -> Result<String, String> {
        let dir = self.dir().join("bases");
        let root = dir.join(&base.name);
        if root.exists() {
            std::fs::remove_dir_all(&root)
                .map_err(|e| format!("cannot clear {}: {e}", root.display()))?;
        }
        assemble(base, &root)?;
        let tar = dir.join(format!("{}.tar", base.name));
        output(
            Command::new("tar")
                .args([
                    "--sort=name",
                    "--mtime=@0",
                    "--numeric-owner",
                    "--owner=0",
                    "--group=0",
                    "-C",
                ])
                .arg(&root)
                .arg("-cf")
                .arg(&tar)
                .arg("."),
        )?;
        let tag = format!(
            "localhost/{}:{:016x}",
            base.name,
            content_hash(&tar, &base.changes)?
        );
        if self
            .command()
            .args(["image", "exists", &tag])
            .status()
            .is_ok_and(|s| s.success())
        {
            return Ok(tag);
        }
        let mut import = self.command();
        import.arg("import").arg("--quiet");
        for change in &base.changes {
            import.arg("--change").arg(change);
        }
        output(import.arg(&tar).arg(&tag))?;
        Ok(tag)
    }

    /// The host's `redis-server` and the libraries it loads on an empty
    /// root: user 999, `/data` its working directory, port 6379, started
    /// as `redis-server --bind 0.0.0.0 --protected-mode no --save ""
    /// --appendonly no` (a cache for a fleet: reachable by the pod's
    /// neighbours, nothing written to disk; replace the arguments to
    /// change that). Its tag.
    pub(crate) fn make_redis_image(&self) -> Result<String, String> {
        let redis = find_on_path("redis-server")
            .ok_or("redis-server is not on PATH (on Debian: apt-get install redis-server)")?;
        let mut base = Base::new("understudy-redis");
        base.binaries
            .push((redis, "/usr/bin/redis-server".to_owned()));
        base.written.push((
            "/etc/passwd".to_owned(),
            "root:x:0:0:root:/root:/sbin/nologin\nredis:x:999:999:redis:/data:/sbin/nologin\n"
                .to_owned(),
        ));
        base.written.push((
            "/etc/group".to_owned(),
            "root:x:0:\nredis:x:999:\n".to_owned(),
        ));
        base.writable_dirs.push("/data".to_owned());
        base.changes.extend(
            [
                "USER 999:999",
                "WORKDIR /data",
                "EXPOSE 6379",
                r#"ENTRYPOINT ["/usr/bin/redis-server"]"#,
                r#"CMD ["--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]"#,
            ]
            .map(str::to_owned),
        );
        self.make_base(&base)
    }
}

/// Writes the root `base` describes into `root`.
fn assemble(base: &Base, root: &Path) -> Result<(), String> {
    let at = |path: &str| root.join(path.trim_start_matches('/'));
    mkdir(root)?;
    if base.host_usr {
        host_usr(root)?;
    }
    for (host, path) in &base.binaries {
        copy(host, &at(path))?;
        for lib in libraries(host)? {
            copy(&lib, &root.join(lib.strip_prefix("/").unwrap_or(&lib)))?;
        }
    }
    for (host, path) in &base.files {
        copy(host, &at(path))?;
    }
    for (path, text) in &base.written {
        let file = at(path);
        if let Some(parent) = file.parent() {
            mkdir(parent)?;
        }
        std::fs::write(&file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    }
    for dir in &base.writable_dirs {
        let dir = at(dir);
        mkdir(&dir)?;
        set_mode(&dir, 0o1777)?;
    }
    Ok(())
}

/// The links into `/usr`, an empty `/usr`, `/root`, and the `/etc` files
/// the host's programs look for.
fn host_usr(root: &Path) -> Result<(), String> {
    if !Path::new("/bin").is_symlink() {
        return Err(
            "the host is not usr-merged (/bin is not a link into /usr): \
                    its /usr alone cannot be mounted into a container"
                .to_owned(),
        );
    }
    for name in USR_LINKS {
        let host = Path::new("/").join(name);
        if let Ok(target) = std::fs::read_link(&host) {
            symlink(&target, &root.join(name))?;
        }
    }
    mkdir(&root.join("usr"))?;
    mkdir(&root.join("root"))?;
    for file in ["/etc/ld.so.cache", "/etc/ld.so.conf"] {
        if Path::new(file).exists() {
            copy(Path::new(file), &root.join(&file[1..]))?;
        }
    }
    copy_dir(
        Path::new("/etc/ld.so.conf.d"),
        &root.join("etc/ld.so.conf.d"),
    )?;
    copy_dir(
        Path::new("/etc/alternatives"),
        &root.join("etc/alternatives"),
    )?;
    let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if bundle.exists() {
        copy(bundle, &root.join("etc/ssl/certs/ca-certificates.crt"))?;
    }
    Ok(())
}

/// The shared libraries `ldd` lists for `binary`, with the loader.
fn libraries(binary: &Path) -> Result<Vec<PathBuf>, String> {
    let listing = output(Command::new("ldd").arg(binary))?;
    parse_ldd(&listing)
        .map_err(|line| format!("{}: a library is missing: {line}", binary.display()))
}

/// The files of an `ldd` listing; the line of a library it did not find.
fn parse_ldd(listing: &str) -> Result<Vec<PathBuf>, String> {
    let mut libs = Vec::new();
    for line in listing.lines() {
        if line.contains("not found") {
            return Err(line.trim().to_owned());
        }
        // `name => /path (addr)`, or `/lib64/ld-linux… (addr)` for the loader.
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// A hash of the packed root and the import's instructions: the tag.
fn content_hash(tar: &Path, changes: &[String]) -> Result<u64, String> {
    let mut hasher = std::hash::DefaultHasher::new();
    let mut file =
        std::fs::File::open(tar).map_err(|e| format!("cannot read {}: {e}", tar.display()))?;
    let mut buf = vec![0; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("cannot read {}: {e}", tar.display()))?;
        if n == 0 {
            break;
        }
        hasher.write(&buf[..n]);
    }
    for change in changes {
        hasher.write(change.as_bytes());
        hasher.write_u8(0);
    }
    Ok(hasher.finish())
}

/// Copies `from` (following links) to `to`, making `to`'s directory.
fn copy(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(parent) = to.parent() {
        mkdir(parent)?;
    }
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

/// Copies the directory `from`'s entries to `to`, links as links.
fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    mkdir(to)?;
    let Ok(entries) = std::fs::read_dir(from) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if let Ok(target) = std::fs::read_link(&path) {
            symlink(&target, &dest)?;
        } else if path.is_file() {
            copy(&path, &dest)?;
        }
    }
    Ok(())
}

fn mkdir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn symlink(target: &Path, link: &Path) -> Result<(), String> {
    std::os::unix::fs::symlink(target, link).map_err(|e| {
        format!(
            "cannot link {} to {}: {e}",
            link.display(),
            target.display()
        )
    })
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_listings() {
        let check = |listing: &str, expected: Result<Vec<&str>, &str>| {
            let expected = expected
                .map(|paths| paths.into_iter().map(PathBuf::from).collect())
                .map_err(str::to_owned);
            assert_eq!(parse_ldd(listing), expected, "{listing}");
        };
        check(
            "\tlinux-vdso.so.1 (0x00007ffd)\n\
             \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f50)\n\
             \t/lib64/ld-linux-x86-64.so.2 (0x00007f51)\n",
            Ok(vec![
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2",
            ]),
        );
        check(
            "\tlibfoo.so.1 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n",
            Err("libfoo.so.1 => not found"),
        );
        check("\tstatically linked\n", Ok(vec![]));
    }
}
