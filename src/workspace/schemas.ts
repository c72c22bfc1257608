/**
 * The workspace options as schemas: WorkspaceManager and WorkspaceFS validate their input with
 * these, and the HTTP API builds its bodies from them, so the bounds live in one place. Unknown
 * fields are refused.
 */
import { z } from 'zod';
import { MAX_LABEL_VALUE, MAX_LABELS, NOT_WELL_FORMED, plainText, wellFormed } from '../runtime/bounds.js';

/** Workspace ids, and node names: both become directory names. */
export const WORKSPACE_ID_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
const MAX_TEXT = 256;

const directoryName = z.string().regex(WORKSPACE_ID_PATTERN, 'must be 1-63 of [a-z0-9_.-], starting with a letter or digit');
const text = plainText(MAX_TEXT).refine((s) => s.trim() !== '', 'is required and must be a non-empty string');
const labels = z
  .record(z.string().min(1).max(MAX_TEXT).refine(wellFormed, NOT_WELL_FORMED), plainText(MAX_LABEL_VALUE))
  .refine((l) => Object.keys(l).length <= MAX_LABELS, `at most ${MAX_LABELS} labels`);

/** Bytes; 0 means no quota. */
export const quotaBytes = z.number().int('must be a whole number of bytes').min(0).max(Number.MAX_SAFE_INTEGER);

/** Permission bits as given (0..0o7777); WorkspaceFS keeps only 0o777 of them. */
export const fileMode = z.number().int('must be an integer permission mode such as 0o644').min(0).max(0o7777, 'must be a permission mode such as 0o644');

export const CreateWorkspaceOptionsSchema = z
  .object({
    id: directoryName.optional(),
    name: text,
    owner: text,
    node: directoryName,
    labels: labels.optional(),
    quotaBytes: quotaBytes.optional(),
  })
  .strict();

export const UpdateWorkspaceOptionsSchema = z.object({ name: text.optional(), labels: labels.optional() }).strict();

export const DeleteWorkspaceOptionsSchema = z.object({ force: z.boolean().optional() }).strict();

export const WriteFileOptionsSchema = z.object({ mode: fileMode.optional() }).strict();

export const ReadDirOptionsSchema = z.object({ recursive: z.boolean().optional() }).strict();
