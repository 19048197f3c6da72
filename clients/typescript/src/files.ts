/**
 * Reading an artifact folder: regular files only, each read once, within a size cap.
 *
 * The folder is opened once and, where the platform allows (Linux's `/proc/self/fd`), every
 * file is opened relative to that open directory, so a folder swapped for another after it
 * was opened is not read. Each file is opened with O_NOFOLLOW (a symbolic link is refused,
 * never followed) and O_NONBLOCK (a FIFO would hang an ordinary open), checked with `fstat`
 * before a byte is read (a FIFO, device, socket or folder is refused), and read or hashed
 * in one pass: the bytes hashed are the bytes then parsed.
 */

import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";

/**
 * An artifact version refused by the loader (Python's `ArtifactError`). `code` is the short
 * stable reason code (`hash_mismatch`, `bad_type`, `certificate_binding`, ...; the `codes`
 * of `artifact_rules.json`) the Python loader gives for the same refusal.
 */
export class ArtifactError extends Error {
  override name = "ArtifactError";
  constructor(message: string, readonly code: string = "refused") {
    super(message);
  }
}

/** Larger JSON files are refused before parsing (an isotonic table of 10^5 knots is ~5 MB). */
export const MAX_JSON_BYTES = 64 * 1024 * 1024;
/** Larger listed files (figures, the joblib copy) are refused before hashing. */
export const MAX_FILE_BYTES = 1024 * 1024 * 1024;

const PROC_FD = process.platform === "linux" && fs.existsSync("/proc/self/fd");
const BLOCK = 1 << 20;

function kindOf(st: fs.Stats): string {
  if (st.isDirectory()) return "a directory";
  if (st.isFIFO()) return "a FIFO";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "a device";
  if (st.isSocket()) return "a socket";
  if (st.isSymbolicLink()) return "a symbolic link";
  return "a special file";
}

/** An open folder whose regular files are read by relative name. */
export class Folder {
  /** Where the folder's entries are opened: the open directory itself, where possible. */
  private readonly base: string;
  private readonly fd: number;

  constructor(readonly dir: string) {
    try {
      this.fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
    } catch (exc) {
      throw new ArtifactError(`${dir}: cannot open the folder (${(exc as NodeJS.ErrnoException).code})`);
    }
    this.base = PROC_FD ? `/proc/self/fd/${this.fd}` : dir;
  }

  close(): void {
    fs.closeSync(this.fd);
  }

  /** The path a message names (the folder as given, not the descriptor's). */
  shown(rel: string): string {
    return path.join(this.dir, rel);
  }

  /** Whether `rel` names anything (a link, a FIFO, ...), as Python's `os.path.lexists`. */
  lexists(rel: string): boolean {
    try {
      fs.lstatSync(path.join(this.base, rel));
      return true;
    } catch {
      return false;
    }
  }

  private open(rel: string, what: string): [number, number] {
    const parts = rel.split("/");
    // intermediate folders must be folders, not links (O_NOFOLLOW guards the last part only)
    for (let i = 1; i < parts.length; i++) {
      const sub = parts.slice(0, i).join("/");
      let st: fs.Stats;
      try {
        st = fs.lstatSync(path.join(this.base, sub));
      } catch {
        throw new ArtifactError(`${this.shown(rel)}: ${what} is missing`, "missing_file");
      }
      if (!st.isDirectory()) throw new ArtifactError(`${this.shown(sub)}: is ${kindOf(st)}, not a folder (links are not followed)`, "bad_file");
    }
    const { O_RDONLY, O_NONBLOCK, O_NOFOLLOW } = fs.constants;
    let fd: number;
    try {
      fd = fs.openSync(path.join(this.base, rel), O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
    } catch (exc) {
      const code = (exc as NodeJS.ErrnoException).code;
      if (code === "ENOENT") throw new ArtifactError(`${this.shown(rel)}: ${what} is missing`, "missing_file");
      if (code === "ELOOP") throw new ArtifactError(`${this.shown(rel)}: ${what} is a symbolic link, not a regular file (links are not followed)`, "bad_file");
      throw new ArtifactError(`${this.shown(rel)}: cannot read ${what} (${code})`, "bad_file");
    }
    const st = fs.fstatSync(fd);
    if (!st.isFile()) {
      fs.closeSync(fd);
      throw new ArtifactError(`${this.shown(rel)}: ${what} is ${kindOf(st)}, not a regular file`, "bad_file");
    }
    return [fd, st.size];
  }

  /** The bytes of a regular file, at most `limit` of them (refused beyond). */
  read(rel: string, what: string, limit = MAX_JSON_BYTES): Buffer {
    const [fd, size] = this.open(rel, what);
    try {
      if (size > limit) throw new ArtifactError(`${this.shown(rel)}: ${what} is larger than ${limit} bytes`, "bad_file");
      const chunks: Buffer[] = [];
      let total = 0;
      for (;;) {
        const buf = Buffer.allocUnsafe(Math.min(BLOCK, limit + 1 - total) || 1);
        const n = readSome(fd, buf, this.shown(rel), what);
        if (n === 0) break;
        chunks.push(buf.subarray(0, n));
        total += n;
        if (total > limit) throw new ArtifactError(`${this.shown(rel)}: ${what} is larger than ${limit} bytes`, "bad_file");
      }
      return Buffer.concat(chunks, total);
    } finally {
      fs.closeSync(fd);
    }
  }

  /** sha256 (hex) of a regular file of at most `MAX_FILE_BYTES`, read in one pass. */
  sha256(rel: string, what: string): string {
    const [fd, size] = this.open(rel, what);
    try {
      if (size > MAX_FILE_BYTES) throw new ArtifactError(`${this.shown(rel)}: ${what} is larger than ${MAX_FILE_BYTES} bytes`, "bad_file");
      const h = createHash("sha256");
      const buf = Buffer.allocUnsafe(BLOCK);
      let total = 0;
      for (;;) {
        const n = readSome(fd, buf, this.shown(rel), what);
        if (n === 0) break;
        total += n;
        if (total > MAX_FILE_BYTES) throw new ArtifactError(`${this.shown(rel)}: ${what} is larger than ${MAX_FILE_BYTES} bytes`, "bad_file");
        h.update(buf.subarray(0, n));
      }
      return h.digest("hex");
    } finally {
      fs.closeSync(fd);
    }
  }

  /** Every entry that is not a folder, as relative `a/b` names (links and FIFOs included). */
  entries(): Set<string> {
    const out = new Set<string>();
    const walk = (sub: string): void => {
      const at = sub ? path.join(this.base, sub) : this.base;
      for (const e of fs.readdirSync(at, { withFileTypes: true })) {
        const rel = sub ? `${sub}/${e.name}` : e.name;
        if (e.isDirectory()) walk(rel);
        else out.add(rel);
      }
    };
    walk("");
    return out;
  }
}

function readSome(fd: number, buf: Buffer, shown: string, what: string): number {
  try {
    return fs.readSync(fd, buf, 0, buf.length, null);
  } catch (exc) {
    throw new ArtifactError(`${shown}: cannot read ${what} (${(exc as NodeJS.ErrnoException).code})`, "bad_file");
  }
}

/** sha256 (hex) of bytes in memory. */
export function sha256Hex(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}
