// Anchor translation unit that owns the shared precompiled header (cmake/vdt_pch.h).
