package android.content.pm;

public class PackageInfo {
    public String versionName;
    @Deprecated public int versionCode;
    public long lastUpdateTime;
    private long longVersionCode;

    public long getLongVersionCode() { return longVersionCode; }
    public void setLongVersionCode(long code) { longVersionCode = code; }
}
