// Copies the artifact rules (amv_calib/contract/artifact_rules.json, the one copy both
// loaders read) into dist/, where artifact.ts reads them; a test holds the copy equal.
import { copyFileSync, mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

const source = new URL("../../../amv_calib/contract/artifact_rules.json", import.meta.url);
const target = new URL("../dist/artifact_rules.json", import.meta.url);
mkdirSync(fileURLToPath(new URL("../dist/", import.meta.url)), { recursive: true });
copyFileSync(fileURLToPath(source), fileURLToPath(target));
