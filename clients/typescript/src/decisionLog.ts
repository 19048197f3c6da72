/**
 * The gate's decision log: the JSON-lines format of `amv_calib/gate/_decision_log.py`, so
 * that `amv-calib label` reads a Node agent's log as it reads a Python agent's.
 *
 * One JSON object per line, UTF-8, `\n`-terminated, in decision order, with the fields and
 * field order of the Python gate's records (`time`, `action_id`, `tool_name`, `theta`,
 * `kappa`, `premises`, `calibrator`, `regime`, `verifier`, `voi`, `reason`, `planner`, `mode`,
 * `verifiers`, and for a run `verifier_calls` and `posteriors`). Non-finite numbers are written
 * as null. Each line goes to the kernel in one `write` on a descriptor opened with O_APPEND,
 * so lines of concurrent writers never interleave on a local file system; a torn last line
 * left by a crash is ended with a newline when the writer opens the file, and a write that
 * fails part-way makes the next line start on a fresh line.
 */

import * as fs from "node:fs";
import * as path from "node:path";

/** One decision record, as written. */
export type DecisionRecord = Record<string, unknown>;

/** The current time as ISO-8601 UTC with microseconds and a `Z` suffix (Python's `utc_now_iso`). */
export function utcNowIso(): string {
  const us = Math.floor((performance.timeOrigin + performance.now()) * 1000);
  const ms = Math.floor(us / 1000);
  const iso = new Date(ms).toISOString(); // 2026-12-02T09:14:03.512Z
  return `${iso.slice(0, 23)}${String(us % 1000).padStart(3, "0")}Z`;
}

/** One record as a compact UTF-8 JSON line ending in `\n` (non-finite numbers as null). */
export function encodeRecord(record: DecisionRecord): Buffer {
  return Buffer.from(JSON.stringify(record) + "\n", "utf8");
}

/** Append decision records to a JSON-lines file, one `write` per line. */
export class DecisionLogWriter {
  readonly path: string;
  readonly fsync: boolean;
  linesWritten = 0;
  private fd: number | null;
  /** True while the file may end in a fragment of ours (a write that failed part-way). */
  private torn = false;

  constructor(file: string, options: { fsync?: boolean } = {}) {
    this.path = file;
    this.fsync = options.fsync ?? false;
    const parent = path.dirname(file);
    if (parent) fs.mkdirSync(parent, { recursive: true });
    const { O_WRONLY, O_APPEND, O_CREAT } = fs.constants;
    const fd = fs.openSync(file, O_WRONLY | O_APPEND | O_CREAT, 0o644);
    try {
      this.repairTornTail(fd);
    } catch (exc) {
      fs.closeSync(fd);
      throw exc;
    }
    this.fd = fd;
  }

  private repairTornTail(fd: number): void {
    const size = fs.fstatSync(fd).size;
    if (size === 0) return;
    const last = Buffer.alloc(1);
    const rfd = fs.openSync(this.path, "r");
    try {
      fs.readSync(rfd, last, 0, 1, size - 1);
    } finally {
      fs.closeSync(rfd);
    }
    // a crashed writer left a partial line: end it so the next record starts clean
    if (last[0] !== 0x0a) writeAll(fd, Buffer.from("\n"));
  }

  /** Write one record as one line (a record without `time` gets the current UTC time). */
  append(record: DecisionRecord): void {
    const rec = "time" in record ? record : { time: utcNowIso(), ...record };
    let data = encodeRecord(rec);
    const fd = this.fd;
    if (fd === null) throw new Error(`decision log ${JSON.stringify(this.path)} is closed`);
    if (this.torn) data = Buffer.concat([Buffer.from("\n"), data]);
    const failed = writeAll(fd, data);
    if (failed !== null) {
      if (failed.written) this.torn = data[failed.written - 1] !== 0x0a;
      throw new Error(`decision log ${JSON.stringify(this.path)}: record not written (${failed.message})`);
    }
    this.torn = false;
    if (this.fsync) fs.fsyncSync(fd);
    this.linesWritten += 1;
  }

  /** Close the file; further appends throw. Idempotent. */
  close(): void {
    if (this.fd !== null) {
      fs.closeSync(this.fd);
      this.fd = null;
    }
  }
}

class PartialWrite extends Error {
  constructor(cause: Error, readonly written: number) {
    super(cause.message);
  }
}

function writeAll(fd: number, data: Buffer): PartialWrite | null {
  let done = 0;
  while (done < data.length) {
    try {
      done += fs.writeSync(fd, data, done, data.length - done);
    } catch (exc) {
      return new PartialWrite(exc as Error, done);
    }
  }
  return null;
}
