/**
 * A strict JSON parser: what `JSON.parse` cannot refuse.
 *
 * Two parsers could pick different copies of a repeated key, so a repeated key is refused at
 * every level (the Python loader's `object_pairs_hook` does the same). Nesting is capped
 * before it is built (no recursion on hostile input), the non-finite tokens `NaN`,
 * `Infinity` and `-Infinity` are refused unless asked for (Python's `json` accepts them, and
 * the calibrator's own check then names the field), and numbers are read as Python reads
 * them: correctly rounded, an integer `-0` as `0`. Objects have no prototype, so a key
 * `__proto__` is a key like any other.
 */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** Why JSON text was refused: its syntax, its nesting, or an integer too large to hold. */
export type JsonProblem = "syntax" | "depth" | "integer";

export class JsonError extends Error {
  override name = "JsonError";
  constructor(message: string, readonly problem: JsonProblem = "syntax") {
    super(message);
  }
}

export interface ParseOptions {
  /** Deepest nesting of objects and arrays allowed (the top level is 1). */
  maxDepth: number;
  /** Accept `NaN`, `Infinity` and `-Infinity` (as Python's `json` does). */
  allowNonFinite?: boolean;
  /**
   * Refuse an integer (written without fraction or exponent) beyond +-this, as the Python
   * loader does: a larger one is not held exactly by a JavaScript number.
   */
  maxSafeInteger?: number;
  /** Remember which numbers were written with a fraction or exponent ({@link writtenAsFloat}). */
  markFloats?: boolean;
}

/** For each parsed container (with `markFloats`), the keys or indices of numbers written as floats. */
const FLOATS = new WeakMap<object, Set<string | number>>();

/**
 * Whether `container[key]` was written as a float (`21.0`, `2.1e1`) rather than an integer
 * (`21`): JavaScript's numbers forget it, Python's `json` does not (`isinstance(x, int)`).
 * Known only for text parsed with `markFloats`; false otherwise.
 */
export function writtenAsFloat(container: object, key: string | number): boolean {
  return FLOATS.get(container)?.has(key) ?? false;
}

const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The text of UTF-8 bytes; a BOM is kept (and then refused by the parser, as Python does). */
export function decodeUtf8(bytes: Uint8Array): string {
  return UTF8.decode(bytes);
}

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);
const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
const ESCAPES: Record<string, string> = {
  '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t",
};

/** Parse JSON text; throws {@link JsonError} naming the line, column and problem. */
export function parseJson(text: string, options: ParseOptions): Json {
  const p = new Parser(text, options);
  p.ws();
  const value = p.value(1);
  p.ws();
  if (p.at < text.length) p.fail("extra data after the JSON value");
  return value;
}

class Parser {
  at = 0;
  /** Whether the last number read was written with a fraction or exponent. */
  lastFloat = false;
  constructor(readonly text: string, readonly opts: ParseOptions) {}

  mark(container: object, key: string | number): void {
    if (!this.lastFloat) return;
    this.lastFloat = false;
    let keys = FLOATS.get(container);
    if (keys === undefined) FLOATS.set(container, (keys = new Set()));
    keys.add(key);
  }

  fail(what: string, at = this.at): never {
    let line = 1;
    let col = 1;
    for (let i = 0; i < at && i < this.text.length; i++) {
      if (this.text.charCodeAt(i) === 0x0a) {
        line += 1;
        col = 1;
      } else col += 1;
    }
    throw new JsonError(`${what} at line ${line} column ${col}`);
  }

  ws(): void {
    const t = this.text;
    while (this.at < t.length && WS.has(t.charCodeAt(this.at))) this.at++;
  }

  value(depth: number): Json {
    const t = this.text;
    const c = t[this.at];
    if (c === "{" || c === "[") {
      if (depth > this.opts.maxDepth) {
        throw new JsonError(`JSON nested deeper than ${this.opts.maxDepth} levels`, "depth");
      }
      return c === "{" ? this.object(depth) : this.array(depth);
    }
    if (c === '"') return this.string();
    if (t.startsWith("true", this.at)) {
      this.at += 4;
      return true;
    }
    if (t.startsWith("false", this.at)) {
      this.at += 5;
      return false;
    }
    if (t.startsWith("null", this.at)) {
      this.at += 4;
      return null;
    }
    for (const [token, v] of [["NaN", NaN], ["Infinity", Infinity], ["-Infinity", -Infinity]] as const) {
      if (t.startsWith(token, this.at)) {
        if (!this.opts.allowNonFinite) this.fail(`non-finite number '${token}' is not allowed`);
        this.at += token.length;
        return v;
      }
    }
    NUMBER.lastIndex = this.at;
    const m = NUMBER.exec(t);
    if (m === null) this.fail(c === undefined ? "unexpected end of the JSON text" : "expecting a value");
    const isInt = m[1] === undefined && m[2] === undefined;
    const limit = this.opts.maxSafeInteger;
    if (isInt && limit !== undefined) {
      const digits = m[0].replace("-", "");
      if (digits.length > 16 || BigInt(digits) > BigInt(limit)) {
        const shown = m[0].length > 40 ? `${m[0].slice(0, 40)}...` : m[0];
        throw new JsonError(`integer ${shown} is beyond +-${limit}, which every reader represents exactly`, "integer");
      }
    }
    this.at += m[0].length;
    const n = Number(m[0]);
    this.lastFloat = this.opts.markFloats === true && !isInt;
    // Python reads an integer as an int: "-0" is 0, not -0.0
    return isInt ? n + 0 : n;
  }

  object(depth: number): JsonObject {
    const out: JsonObject = Object.create(null) as JsonObject;
    const t = this.text;
    this.at++;
    this.ws();
    if (t[this.at] === "}") {
      this.at++;
      return out;
    }
    for (;;) {
      if (t[this.at] !== '"') this.fail("expecting a property name enclosed in double quotes");
      const keyAt = this.at;
      const key = this.string();
      if (Object.prototype.hasOwnProperty.call(out, key)) {
        this.fail(`key ${JSON.stringify(key)} appears twice`, keyAt);
      }
      this.ws();
      if (t[this.at] !== ":") this.fail("expecting ':' delimiter");
      this.at++;
      this.ws();
      out[key] = this.value(depth + 1);
      this.mark(out, key);
      this.ws();
      const c = t[this.at];
      this.at++;
      if (c === "}") return out;
      if (c !== ",") this.fail("expecting ',' delimiter", this.at - 1);
      this.ws();
    }
  }

  array(depth: number): Json[] {
    const out: Json[] = [];
    const t = this.text;
    this.at++;
    this.ws();
    if (t[this.at] === "]") {
      this.at++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth + 1));
      this.mark(out, out.length - 1);
      this.ws();
      const c = t[this.at];
      this.at++;
      if (c === "]") return out;
      if (c !== ",") this.fail("expecting ',' delimiter", this.at - 1);
      this.ws();
    }
  }

  string(): string {
    const t = this.text;
    let at = this.at + 1;
    let out = "";
    let from = at;
    for (;;) {
      if (at >= t.length) this.fail("unterminated string", this.at);
      const c = t.charCodeAt(at);
      if (c === 0x22) break;
      if (c < 0x20) this.fail("invalid control character in a string", at);
      if (c === 0x5c) {
        out += t.slice(from, at);
        const e = t[at + 1];
        if (e === "u") {
          const hex = t.slice(at + 2, at + 6);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail("invalid \\uXXXX escape", at);
          out += String.fromCharCode(parseInt(hex, 16));
          at += 6;
        } else {
          const r = e === undefined ? undefined : ESCAPES[e];
          if (r === undefined) this.fail("invalid escape", at);
          out += r;
          at += 2;
        }
        from = at;
        continue;
      }
      at++;
    }
    out += t.slice(from, at);
    this.at = at + 1;
    return out;
  }
}

/** A JSON object (not an array, not null), for type narrowing. */
export function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Whether `obj` has its own key `key` (objects here may lack a prototype). */
export function has(obj: object, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key);
}
