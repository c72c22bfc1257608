/**
 * The envd version sbx advertises to the e2b SDK (`envdVersion`). The SDK gates features on it:
 * ≥ 0.3.0 lets a command say `stdin: false`, ≥ 0.4.0 leaves the user to the sandbox's default,
 * ≥ 0.5.2 has closeStdin, ≥ 0.5.7 uploads as application/octet-stream. sbx serves all of those;
 * 0.6.2 (file metadata) and 0.6.3 (entry info in watch events) are not served, so it stays here.
 */
export const ENVD_VERSION = '0.5.7';
